// Client-side sorting of the rows a page shows (the server sorts the Fleet across pages
// through its links; this sorts what is on screen, on any table with class "sortable").
// No inline script: the Content-Security-Policy allows only this file.
(function () {
  "use strict";
  function cellValue(td) {
    var v = td.getAttribute("data-value");
    if (v === null) v = td.textContent.trim();
    var n = Number(v);
    return v !== "" && !isNaN(n) ? n : v.toLowerCase();
  }
  function sortBy(table, col, th) {
    var body = table.tBodies[0];
    if (!body) return;
    var asc = th.getAttribute("aria-sort") !== "ascending";
    var rows = Array.prototype.slice.call(body.rows).filter(function (r) { return r.cells.length > col; });
    rows.sort(function (a, b) {
      var x = cellValue(a.cells[col]), y = cellValue(b.cells[col]);
      var c = x < y ? -1 : x > y ? 1 : 0;
      return asc ? c : -c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
    Array.prototype.forEach.call(th.parentNode.cells, function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", asc ? "ascending" : "descending");
  }
  document.addEventListener("DOMContentLoaded", function () {
    Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
      if (!table.tHead) return;
      Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, i) {
        if (th.querySelector("a")) return; // the server sorts this column across pages
        th.classList.add("js-sortable");
        th.addEventListener("click", function (e) {
          e.preventDefault();
          sortBy(table, i, th);
        });
      });
    });
  });
})();
