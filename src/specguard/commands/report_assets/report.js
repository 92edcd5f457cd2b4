// specguard report: the details panel and keyboard moves over the module map.
// The page is readable without this script; it reads the data the page embeds.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("report-data").textContent);
  var details = document.getElementById("details");
  var cells = Array.prototype.slice.call(document.querySelectorAll("td.cell"));
  var grid = {};  // "row,col" -> td
  cells.forEach(function (td) { grid[td.dataset.row + "," + td.dataset.col] = td; });
  var nRows = data.rows.length, nCols = data.columns.length;
  var engines = data.engines.map(function (g) { return g.name; });

  function el(tag, cls, text) {
    var n = document.createElement(tag);
    if (cls) { n.className = cls; }
    if (text !== undefined) { n.textContent = text; }
    return n;
  }
  function pair(dl, key, value) { dl.appendChild(el("dt", "", key)); dl.appendChild(el("dd", "", value)); }

  function show(td) {
    cells.forEach(function (c) { c.classList.remove("selected"); c.setAttribute("aria-pressed", "false"); });
    td.classList.add("selected");
    td.setAttribute("aria-pressed", "true");
    var cell = data.cells[Number(td.dataset.cell)];
    var row = data.rows[Number(td.dataset.row)];
    var col = data.columns[Number(td.dataset.col)];
    details.textContent = "";
    details.appendChild(el("h3", "", row.label + " · " + col.title));
    cell.routes.forEach(function (i) {
      var r = data.routes[i];
      var box = el("div", "route");
      var head = el("p");
      head.appendChild(el("code", "", r.prefix));
      box.appendChild(head);
      var dl = el("dl");
      pair(dl, "role", r.role);
      pair(dl, "checkpoint names", r.names || "none stored");
      pair(dl, "stored", r.stored);
      pair(dl, "declared", r.declared + " — by " + r.declared_by);
      r.built.forEach(function (b, e) {
        if (!b) { return; }
        pair(dl, engines[e] + " builds", b.method + " — " + b.why);
        var v = el("dd", b.verdict === "ok" ? "verdict-ok" : "verdict-bad", b.verdict + ": " + b.reason);
        dl.appendChild(el("dt", "", "verdict"));
        dl.appendChild(v);
      });
      box.appendChild(dl);
      details.appendChild(box);
    });
  }

  function focusCell(td) {
    cells.forEach(function (c) { c.tabIndex = -1; });
    td.tabIndex = 0;
    td.focus();
  }

  function step(td, dr, dc) {
    var r = Number(td.dataset.row), c = Number(td.dataset.col);
    for (var k = 1; k < Math.max(nRows, nCols); k++) {
      var nr = r + dr * k, nc = c + dc * k;
      if (nr < 0 || nc < 0 || nr >= nRows || nc >= nCols) { return null; }
      var hit = grid[nr + "," + nc];
      if (hit) { return hit; }
    }
    return null;
  }

  var moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
  cells.forEach(function (td) {
    td.addEventListener("click", function () { focusCell(td); show(td); });
    td.addEventListener("keydown", function (ev) {
      if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); show(td); return; }
      var m = moves[ev.key];
      if (!m) { return; }
      ev.preventDefault();
      var next = step(td, m[0], m[1]);
      if (next) { focusCell(next); }
    });
  });
  // The first marked cell (else the first cell) takes the keyboard's tab stop.
  var first = document.querySelector("td.cell.marked") || cells[0];
  if (first) { first.tabIndex = 0; }
  document.body.dataset.ready = "1";
})();
