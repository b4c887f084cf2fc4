// Live updates. Each [data-live] block names the websocket groups it follows (space-separated
// paths) and the partial it shows; on an event it re-fetches the partial from the server, so
// the server still decides what the user may see. `data-events` narrows which events count
// ("anomaly.changed", or "cluster.changed:mode" for one part of a cluster). One socket per
// path is shared by every block; a closed socket reconnects and refreshes what it missed.
(function () {
  "use strict";
  var sockets = {};
  var DEBOUNCE_MS = 300;

  function matches(block, event) {
    var wanted = (block.dataset.events || "").split(/\s+/).filter(Boolean);
    if (!wanted.length) { return true; }
    return wanted.some(function (w) {
      var parts = w.split(":");
      return parts[0] === event.type && (parts.length === 1 || parts[1] === event.what);
    });
  }

  function editing(block) {
    // Never replace a form the user is typing into; refresh once they leave it.
    var active = document.activeElement;
    return active && block.contains(active) && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName);
  }

  // Text typed into a row's box (a review comment) survives a refresh of the block: rows are
  // found again by their data-advice (or id), boxes by their name.
  function draftKey(box) {
    var row = box.closest("[data-advice], [id]");
    return row ? (row.dataset.advice || row.id) + "/" + box.name : null;
  }

  function unsavedText(block) {
    var drafts = {};
    block.querySelectorAll("textarea").forEach(function (box) {
      var key = draftKey(box);
      if (key && box.value) { drafts[key] = box.value; }
    });
    return drafts;
  }

  function restoreText(block, drafts) {
    block.querySelectorAll("textarea").forEach(function (box) {
      var key = draftKey(box);
      if (key && drafts[key] && !box.value) { box.value = drafts[key]; }
    });
  }

  function refresh(block) {
    if (editing(block)) {
      block.dataset.stale = "1";
      return;
    }
    fetch(block.dataset.partial, { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (html === null) { return; }
        if (editing(block)) { block.dataset.stale = "1"; return; }  // they started typing meanwhile
        var drafts = unsavedText(block);
        block.innerHTML = html;
        restoreText(block, drafts);
        block.dataset.refreshed = String(Number(block.dataset.refreshed || 0) + 1);
        if (window.ConsoleCharts) { window.ConsoleCharts.render(block); }
        block.dispatchEvent(new CustomEvent("live:refreshed", { bubbles: true }));
      });
  }

  function schedule(block) {
    if (block._timer) { return; }
    block._timer = setTimeout(function () { block._timer = null; refresh(block); }, DEBOUNCE_MS);
    // `data-settle` (ms): look once more a little later, for rows that follow the event in a
    // later transaction (advice is decided just after the anomaly it answers is stored).
    var settle = Number(block.dataset.settle || 0);
    if (settle && !block._settle) {
      block._settle = setTimeout(function () { block._settle = null; refresh(block); }, settle);
    }
  }

  function indicate() {
    var paths = Object.keys(sockets);
    var open = paths.length > 0 && paths.every(function (p) { return sockets[p].open; });
    document.body.dataset.live = paths.length ? (open ? "open" : "connecting") : "none";
    document.querySelectorAll("[data-live-indicator]").forEach(function (dot) {
      dot.classList.toggle("on", open);
    });
  }

  function connect(path) {
    var entry = sockets[path];
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var socket = new WebSocket(scheme + location.host + path);
    socket.onopen = function () { entry.open = true; indicate(); };
    socket.onmessage = function (message) {
      var event = JSON.parse(message.data);
      entry.blocks.forEach(function (block) { if (matches(block, event)) { schedule(block); } });
    };
    socket.onclose = function () {
      var wasOpen = entry.open;
      entry.open = false;
      indicate();
      setTimeout(function () {
        if (wasOpen) { entry.blocks.forEach(schedule); }
        connect(path);
      }, wasOpen ? 1000 : 5000);
    };
  }

  document.querySelectorAll("[data-live]").forEach(function (block) {
    block.dataset.live.split(/\s+/).filter(Boolean).forEach(function (path) {
      if (!sockets[path]) { sockets[path] = { blocks: [], open: false }; }
      sockets[path].blocks.push(block);
    });
    block.addEventListener("focusout", function () {
      setTimeout(function () {
        if (block.dataset.stale && !editing(block)) { delete block.dataset.stale; refresh(block); }
      }, 0);
    });
  });
  Object.keys(sockets).forEach(connect);
  indicate();

  // [data-lazy] blocks load their (slow) partial after the page; a [data-reload] link in one
  // loads its href into the block again.
  document.querySelectorAll("[data-lazy]").forEach(function (block) {
    refresh(block);
    block.addEventListener("click", function (event) {
      var link = event.target.closest("a[data-reload]");
      if (!link) { return; }
      event.preventDefault();
      block.dataset.partial = link.getAttribute("href");
      refresh(block);
    });
  });
})();
