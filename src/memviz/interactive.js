// memviz's interactive page: tooltips that say who allocated what, and zoom and pan of the
// timeline. Reads the JSON blob of <script id="memviz-data"> (see page_data.rs); fetches nothing.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("memviz-data").textContent);
  var tip = document.createElement("div");
  tip.id = "memviz-tip";
  document.body.appendChild(tip);

  function bytes(n) {
    var units = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0, v = n;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return (i === 0 ? String(v) : v.toFixed(v < 10 ? 2 : 1)) + " " + units[i] + (i ? " (" + n + " bytes)" : "");
  }
  function time(us) {
    if (us < 0) return "";
    return us < 1000 ? " (+" + us + " µs)" : us < 1e6 ? " (+" + (us / 1e3).toFixed(3) + " ms)" : " (+" + (us / 1e6).toFixed(3) + " s)";
  }
  function stackLines(s) {
    if (s < 0) return ["stack: none recorded"];
    return ["stack:"].concat(data.stacks[s].map(function (f) { return "  " + data.frames[f]; }));
  }
  // The lines of a band's tooltip.
  function bandLines(i) {
    var b = data.bands[i];
    var alloc = b[3] < 0 ? "allocated before the trace" : "allocated at event " + b[3] + time(b[5]);
    var free = b[4] < 0 ? "still live at the end" : "freed at event " + b[4] + time(b[6]);
    return [bytes(b[0]) + " at " + b[2], "stream " + b[1] + ", " + data.pools[b[7]], alloc, free].concat(stackLines(b[8]));
  }
  // The lines of a segment block's tooltip.
  function blockLines(i) {
    var b = data.blocks[i];
    var lines = ["block " + b[0] + ": " + bytes(b[1]), b[3] + (b[3] === "inactive" ? "" : ", " + bytes(b[2]) + " requested"),
      "stream " + b[4] + ", " + data.pools[b[5]]];
    if (b[3] !== "inactive") {
      lines.push(b[6] < 0 ? "allocated before the trace" : "allocated at event " + b[6] + time(b[7]));
      lines = lines.concat(stackLines(b[8]));
    }
    return lines;
  }
  // Native <title> tooltips become ours (one kind of tooltip on the page).
  Array.prototype.forEach.call(document.querySelectorAll("svg title"), function (t) {
    var el = t.parentNode;
    if (!el.hasAttribute("data-b") && !el.hasAttribute("data-k")) el.setAttribute("data-tip", t.textContent);
    el.removeChild(t);
  });
  function show(lines, x, y) {
    tip.textContent = "";
    lines.forEach(function (l, n) {
      var d = document.createElement("div");
      d.textContent = l;
      if (n === 0) d.className = "head";
      tip.appendChild(d);
    });
    tip.style.display = "block";
    var w = tip.offsetWidth, h = tip.offsetHeight;
    var left = x + 14 + w > window.innerWidth ? Math.max(0, x - 14 - w) : x + 14;
    var top = y + 14 + h > window.innerHeight ? Math.max(0, y - 14 - h) : y + 14;
    tip.style.left = left + window.scrollX + "px";
    tip.style.top = top + window.scrollY + "px";
  }
  function hide() { tip.style.display = "none"; }
  var drag = null;
  document.addEventListener("mousemove", function (e) {
    if (drag) return;
    var el = e.target.closest ? e.target.closest("[data-b],[data-k],[data-tip]") : null;
    if (!el) return hide();
    if (el.hasAttribute("data-b")) show(bandLines(+el.getAttribute("data-b")), e.clientX, e.clientY);
    else if (el.hasAttribute("data-k")) show(blockLines(+el.getAttribute("data-k")), e.clientX, e.clientY);
    else show(el.getAttribute("data-tip").split("\n"), e.clientX, e.clientY);
  });
  document.addEventListener("mouseleave", hide);

  // Zoom and pan: the plot's contents (class tl-zoom) stretched along x; the visible moments
  // [lo, hi) of [0, moments) drawn over the plot's width, the tick labels redrawn for them.
  var group = document.querySelector("#timeline [data-plot]");
  if (!group) { document.body.setAttribute("data-memviz", "ready"); return; }
  var plot = group.getAttribute("data-plot").split(" ").map(Number);
  var moments = +group.getAttribute("data-moments");
  var zoom = group.querySelector(".tl-zoom"), svg = group.ownerSVGElement;
  var X = plot[0], W = plot[2], axisY = plot[1] + plot[3];
  var lo = 0, hi = moments;
  var ticks = document.createElementNS("http://www.w3.org/2000/svg", "g");
  ticks.setAttribute("class", "tl-ticks");
  group.appendChild(ticks);
  var bar = document.createElement("div");
  bar.id = "memviz-zoom";
  ["\u2212", "+", "reset"].forEach(function (label) {
    var b = document.createElement("button");
    b.textContent = label;
    b.addEventListener("click", function () {
      if (label === "reset") set(0, moments);
      else scale(label === "+" ? 0.5 : 2, (lo + hi) / 2);
    });
    bar.appendChild(b);
  });
  var range = document.createElement("span");
  bar.appendChild(range);
  svg.parentNode.insertBefore(bar, svg);
  function nice(span) {
    var raw = span / 6, k = Math.pow(10, Math.floor(Math.log10(Math.max(raw, 1e-9)))), m = raw / k;
    return Math.max(1, (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * k);
  }
  function set(a, b) {
    var span = Math.min(moments, Math.max(Math.min(2, moments), b - a));
    a = Math.max(0, Math.min(moments - span, a));
    lo = a; hi = a + span;
    var k = moments / span;
    zoom.setAttribute("transform", "translate(" + (X - k * (X + lo * W / moments)) + ",0) scale(" + k + ",1)");
    var whole = lo === 0 && hi === moments;
    var fixed = group.querySelectorAll(".x-ticks, .tl-fixed");
    Array.prototype.forEach.call(fixed, function (g) { g.style.display = whole ? "" : "none"; });
    while (ticks.firstChild) ticks.removeChild(ticks.firstChild);
    var step = nice(hi - lo);
    for (var t = Math.ceil(lo / step) * step; !whole && t <= hi - 1; t += step) {
      var x = X + (t - lo) * W / span;
      var label = document.createElementNS("http://www.w3.org/2000/svg", "text");
      label.setAttribute("x", x); label.setAttribute("y", axisY + 16);
      label.setAttribute("font-size", "11"); label.setAttribute("text-anchor", "middle");
      label.textContent = String(t);
      ticks.appendChild(label);
    }
    range.textContent = whole ? "all " + data.events + " events (wheel or buttons zoom, drag pans)"
      : "events " + Math.floor(lo) + " to " + Math.ceil(hi - 1) + " of " + data.events;
  }
  function scale(f, at) { set(at - (at - lo) * f, at + (hi - at) * f); }
  function momentAt(clientX) {
    var r = svg.getBoundingClientRect(), x = (clientX - r.left) * svg.viewBox.baseVal.width / r.width;
    return lo + (x - X) / W * (hi - lo);
  }
  svg.addEventListener("wheel", function (e) {
    e.preventDefault();
    scale(e.deltaY < 0 ? 0.8 : 1.25, momentAt(e.clientX));
  }, { passive: false });
  svg.addEventListener("mousedown", function (e) {
    var r = svg.getBoundingClientRect(), px = r.width * W / svg.viewBox.baseVal.width;
    drag = { x: e.clientX, lo: lo, perPx: (hi - lo) / px, span: hi - lo };
    hide();
    e.preventDefault();
  });
  window.addEventListener("mousemove", function (e) {
    if (!drag) return;
    var a = drag.lo + (drag.x - e.clientX) * drag.perPx;
    set(a, a + drag.span);
  });
  window.addEventListener("mouseup", function () { drag = null; });
  set(0, moments);
  document.body.setAttribute("data-memviz", "ready");
})();
