// Live updates: each [data-live] block listens on its websocket group and, on any event,
// re-fetches its partial from the server (so the server still decides what the user may see).
// If the socket cannot stay open, it falls back to refreshing every few seconds.
(function () {
  function refresh(block) {
    fetch(block.dataset.partial, { credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) { if (html !== null) { block.innerHTML = html; } });
  }
  function listen(block) {
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var socket = new WebSocket(scheme + location.host + block.dataset.live);
    var timer = null;
    socket.onmessage = function () {
      if (timer === null) {
        timer = setTimeout(function () { timer = null; refresh(block); }, 300);
      }
    };
    socket.onclose = function () {
      setTimeout(function () { refresh(block); listen(block); }, 5000);
    };
  }
  document.querySelectorAll("[data-live]").forEach(listen);
})();
