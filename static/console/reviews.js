// The review queue from the keyboard: j/k move, a agrees, d then 1-4 disagrees with the action
// you would have taken, c writes a comment, o opens the anomaly, ? toggles the help. Labels are
// posted with fetch (the forms still work without JavaScript); a live refresh of the queue
// keeps the selection on the same advice.
(function () {
  "use strict";
  var block = document.getElementById("queue-live");
  if (!block) { return; }
  var selectedId = null;
  var disagreeing = false;

  function items() {
    return Array.prototype.slice.call(block.querySelectorAll(".item:not(.done)"));
  }

  function current() {
    return selectedId && block.querySelector('.item[data-advice="' + selectedId + '"]:not(.done)');
  }

  function select(item) {
    block.querySelectorAll(".item.selected").forEach(function (el) { el.classList.remove("selected", "open"); });
    disagreeing = false;
    selectedId = item ? item.dataset.advice : null;
    document.body.dataset.selectedAdvice = selectedId || "";
    if (!item) { return; }
    item.classList.add("selected");
    item.focus({ preventScroll: true });
    item.scrollIntoView({ block: "nearest" });
  }

  function move(step) {
    var list = items();
    if (!list.length) { return select(null); }
    var index = list.indexOf(current());
    var next = index < 0 ? 0 : Math.min(list.length - 1, Math.max(0, index + step));
    select(list[next]);
  }

  function showError(item, text) {
    var error = item.querySelector("[data-error]");
    error.textContent = text;
    error.hidden = !text;
  }

  function submit(item, verdict, action) {
    var form = item.querySelector("form");
    var data = new FormData(form);
    data.set("verdict", verdict);
    if (action) { data.set("preferred_action", action); }
    showError(item, "");
    item.dataset.pending = "1";
    fetch(form.action, {
      method: "POST",
      body: data,
      credentials: "same-origin",
      headers: { "Accept": "application/json", "X-CSRFToken": data.get("csrfmiddlewaretoken") }
    }).then(function (response) {
      return response.json().then(function (body) { return { ok: response.ok, body: body }; });
    }).then(function (result) {
      delete item.dataset.pending;
      if (!result.ok) { showError(item, result.body.error || "not labelled"); return; }
      var list = items();
      var index = list.indexOf(item);
      item.classList.add("done");
      item.dataset.labelled = verdict;
      var waiting = block.querySelector("[data-waiting]");
      if (waiting) { waiting.textContent = String(Math.max(0, Number(waiting.textContent) - 1)); }
      var rest = items();
      select(rest[Math.min(index, rest.length - 1)] || null);
    }).catch(function () {
      delete item.dataset.pending;
      showError(item, "The label was not saved (network error); try again.");
    });
  }

  function actionByKey(item, key) {
    var option = item.querySelector('option[data-key="' + key + '"]');
    return option && !option.disabled ? option.value : null;
  }

  function onKey(event) {
    if (event.ctrlKey || event.metaKey || event.altKey) { return; }
    var target = event.target;
    var item = current();
    if (target.tagName === "TEXTAREA" || target.tagName === "INPUT" || target.tagName === "SELECT") {
      if (event.key === "Escape" || (event.key === "Enter" && !event.shiftKey && target.tagName === "TEXTAREA")) {
        event.preventDefault();
        target.blur();
        if (item) { item.focus({ preventScroll: true }); }
      }
      return;
    }
    if (event.key === "f") { toggleSingle(); return; }
    if (event.key === "?") { document.getElementById("keys").hidden = !document.getElementById("keys").hidden; return; }
    if (event.key === "j" || event.key === "ArrowDown") { event.preventDefault(); move(1); return; }
    if (event.key === "k" || event.key === "ArrowUp") { event.preventDefault(); move(-1); return; }
    if (!item) { if (event.key === "a" || event.key === "d" || event.key === "c") { move(0); } return; }
    if (disagreeing && /^[1-4]$/.test(event.key)) {
      var action = actionByKey(item, event.key);
      if (action) { disagreeing = false; item.classList.remove("open"); submit(item, "disagree", action); }
      else { showError(item, "That is the advised action: pick another, or press a to agree."); }
      return;
    }
    if (event.key === "Escape") { disagreeing = false; item.classList.remove("open"); showError(item, ""); return; }
    if (event.key === "a") { submit(item, "agree"); return; }
    if (event.key === "d") {
      disagreeing = true;
      item.classList.add("open");
      showError(item, "Disagree: press 1–4 for the action you would have taken (Esc cancels).");
      return;
    }
    if (event.key === "c") { event.preventDefault(); item.querySelector("textarea").focus(); return; }
    if (event.key === "o") { location.href = item.dataset.anomalyUrl; }
  }

  // One at a time: only the selected advice shows (kept across live refreshes).
  function toggleSingle() {
    var single = document.body.classList.toggle("review-single");
    try { localStorage.setItem("reviewSingle", single ? "1" : ""); } catch (e) { /* private mode */ }
  }
  try { if (localStorage.getItem("reviewSingle")) { document.body.classList.add("review-single"); } } catch (e) { /* ignore */ }
  var toggle = document.getElementById("toggle-single");
  if (toggle) { toggle.addEventListener("click", function (event) { event.preventDefault(); toggleSingle(); }); }

  document.addEventListener("keydown", onKey);
  block.addEventListener("click", function (event) {
    var item = event.target.closest(".item");
    if (item && item !== current()) { select(item); }
    var button = event.target.closest("button[data-key]");
    if (!button || !item) { return; }
    event.preventDefault();
    if (button.dataset.key === "a") { submit(item, "agree"); return; }
    var chosen = item.querySelector("select").value;
    if (!chosen) { showError(item, "Choose the action you would have taken."); return; }
    submit(item, "disagree", chosen);
  });
  block.addEventListener("live:refreshed", function () {
    // The list was re-rendered: keep the same advice selected, or the first one left.
    var again = current();
    select(again || items()[0] || null);
  });
  move(0);
})();
