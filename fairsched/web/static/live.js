// fairsched web: live parts of a page and the queue page's share chart. No inline script:
// settings come from data- attributes (refresh interval, queue, chart tenants).
"use strict";
(function () {
  var refreshMs = parseInt(document.body.dataset.refreshMs || "2000", 10);
  var rates = {};

  function fragmentUrl() {
    var url = new URL(window.location.href);
    url.searchParams.set("fragment", "1");
    return url.toString();
  }

  // Claims per second on the overview, from two reads' claim totals and database times.
  function updateRates(root) {
    root.querySelectorAll("[data-claimed]").forEach(function (cell) {
      var queue = cell.closest("tr").dataset.queue;
      var now = { claimed: parseFloat(cell.dataset.claimed), at: parseFloat(cell.dataset.at) };
      var before = rates[queue];
      if (before && now.at > before.at) {
        cell.textContent = (Math.max(0, now.claimed - before.claimed) / (now.at - before.at)).toFixed(1);
      }
      rates[queue] = now;
    });
  }

  function refreshLive() {
    var live = document.querySelector("[data-live]");
    if (!live) return;
    fetch(fragmentUrl(), { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html !== null) { live.innerHTML = html; updateRates(live); }
      })
      .catch(function () {})
      .finally(function () { window.setTimeout(refreshLive, refreshMs); });
  }

  var COLORS = ["#2f5bd3", "#d35400", "#27ae60", "#8e44ad", "#c0392b", "#16a085", "#7f8c8d", "#b7950b"];
  var WINDOW_SECONDS = 300;

  function shareChart(el) {
    var tenants = el.dataset.tenants ? el.dataset.tenants.split("\n") : [];
    if (!tenants.length || typeof uPlot === "undefined") return;
    var note = document.getElementById("share-chart-note");
    var data = [[]];
    var series = [{}];
    tenants.forEach(function (t, i) {
      var color = COLORS[i % COLORS.length];
      data.push([]); data.push([]);
      series.push({ label: t, stroke: color, width: 2, value: function (u, v) { return v == null ? "-" : v.toFixed(1) + "%"; } });
      series.push({ label: t + " entitled", stroke: color, width: 1, dash: [6, 4], value: function (u, v) { return v == null ? "-" : v.toFixed(1) + "%"; } });
    });
    var plot = new uPlot({
      width: Math.max(480, el.clientWidth - 4), height: 240, series: series,
      scales: { y: { range: [0, 100] } },
      axes: [{}, { values: function (u, vals) { return vals.map(function (v) { return v + "%"; }); } }],
      legend: { live: false }
    }, data, el);
    var before = null;
    var query = tenants.map(function (t) { return "tenant=" + encodeURIComponent(t); }).join("&");
    var url = "/queues/" + encodeURIComponent(el.dataset.queue) + "/shares.json?" + query;

    function sample() {
      fetch(url, { credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (now) {
          if (!now) return;
          if (before && now.at > before.at) {
            var total = now.claimed - before.claimed;
            data[0].push(now.at);
            tenants.forEach(function (t, i) {
              var a = now.tenants[t], b = before.tenants[t];
              var claims = a && b ? a.claimed - b.claimed : null;
              data[1 + 2 * i].push(total > 0 && claims !== null ? (100 * claims) / total : null);
              data[2 + 2 * i].push(a ? 100 * a.entitled : null);
            });
            while (data[0].length && data[0][0] < now.at - WINDOW_SECONDS) {
              data.forEach(function (column) { column.shift(); });
            }
            plot.setData(data);
            el.dataset.samples = String(data[0].length);
            if (note) note.textContent = total + " claims in the last interval; the last " + Math.round(WINDOW_SECONDS / 60) + " minutes shown";
          }
          before = now;
        })
        .catch(function () {})
        .finally(function () { window.setTimeout(sample, refreshMs); });
    }
    sample();
  }

  document.addEventListener("DOMContentLoaded", function () {
    updateRates(document);
    if (document.querySelector("[data-live]")) window.setTimeout(refreshLive, refreshMs);
    var chart = document.getElementById("share-chart");
    if (chart) shareChart(chart);
  });
})();
