"""The mutation tier: each guarantee broken on purpose, and the tests that must notice.

A mutation is a named text edit of the code that carries a guarantee (a fenced
transition's token compare, the claim's ``SKIP LOCKED``, the backoff's jitter, ...),
kept in a ``mutations.toml`` beside that code (:mod:`mutation.catalog`). ``python -m
mutation`` applies each to a scratch copy of the checkout and runs the tests that claim
to guard it there; it fails unless at least one of them fails (:mod:`mutation.runner`).

The guarantees live in SQL: the engine's migrations, and the statements the engine and
the policies compose in Python strings. An AST mutation tool (mutmut, cosmic-ray) edits
Python operators and constants, not the SQL inside a string, so every mutation is a named
text edit. Lab and CI tooling: not part of the installed package.
"""
