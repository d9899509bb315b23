"""``python -m mutation [--only NAME ...] [--jobs N]`` (from the repository's root).

Checks every tracked ``mutations.toml``, runs the selected mutations' guards once on the
unmutated checkout (they must pass), then each mutation on a scratch copy, and prints the
table: mutation | caught by | seconds. Exits 0 when every mutation was caught, 1 when one
survived, 2 on an error (a mutation that no longer applies, guards that do not pass
unmutated, a pytest run that errored).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mutation.catalog import MutationError, load
from mutation.runner import Outcome, baseline_template, imports_from, mutation_run, pytest_run, scratch_copy


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mutation", description=__doc__)
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="run this mutation")
    parser.add_argument("--jobs", type=int, default=1, help="mutations run at once (default 1)")
    parser.add_argument("--list", action="store_true", help="check the catalog and list it; run nothing")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    root = Path.cwd()
    started = time.monotonic()
    try:
        mutations = load(root)
    except MutationError as error:
        print(f"mutation catalog error: {error}", file=sys.stderr)
        return 2
    unknown = sorted(set(args.only) - {m.name for m in mutations})
    if unknown:
        print(f"no such mutation: {', '.join(unknown)}", file=sys.stderr)
        return 2
    selected = [m for m in mutations if not args.only or m.name in args.only]
    if args.list:
        for m in selected:
            print(f"{m.name} ({m.source}): {m.guarantee}")
        return 0
    with tempfile.TemporaryDirectory(prefix="fairsched-mutation-") as parent:
        scratch = scratch_copy(root, Path(parent))
        print("the scratch copies import from themselves:", *imports_from(scratch), sep="\n  ")
        tests = sorted({t for m in selected for t in (*m.guards, *m.keeps)})
        print(f"\n== unmutated: {len(tests)} guard and keep test node(s) must pass", flush=True)
        code, failed, errored, output = pytest_run(scratch, tests)
        if code != 0:
            print(output, f"\nthe guards fail without a mutation: {failed + errored}", file=sys.stderr)
            return 2
        baseline = baseline_template(scratch)
        print(f"\n== {len(selected)} mutation(s), {args.jobs} at a time", flush=True)
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = [pool.submit(mutation_run, root, Path(parent), m, baseline) for m in selected]
            outcomes = []
            for future in futures:
                outcome = future.result()
                print(f"{outcome.verdict:>8}  {outcome.name}  {outcome.seconds:.0f} s", flush=True)
                outcomes.append(outcome)
    print(table(outcomes, time.monotonic() - started))
    bad = [o for o in outcomes if o.verdict != "caught"]
    for o in bad:
        print(f"\nmutation {o.name} {o.verdict.upper()}: {o.detail}", file=sys.stderr)
    if any(o.verdict == "error" for o in bad):
        return 2
    return 1 if bad else 0


def table(outcomes: list[Outcome], total: float) -> str:
    """The markdown table of the run: mutation | caught by | seconds, and the total."""
    rows = ["", "| mutation | caught by | seconds |", "| --- | --- | ---: |"]
    for o in outcomes:
        caught = "<br>".join(o.failed) if o.verdict == "caught" else o.verdict.upper()
        rows.append(f"| {o.name} | {caught} | {o.seconds:.0f} |")
    rows.append(f"\ntotal: {total:.0f} s")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
