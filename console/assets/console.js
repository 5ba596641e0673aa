// The console's live update: fetch the page's live part again every few
// seconds and put it in place, unless the reader is using a control in it
// (a ticked box, a field being typed in). Without JavaScript the pages
// read the same, and a reload refreshes them.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live || !live.dataset.live) { return; }
  var every = parseInt(live.dataset.refresh, 10) || 2000;
  function busy() {
    if (live.contains(document.activeElement) && document.activeElement !== live) { return true; }
    return live.querySelector("input[type=checkbox]:checked, input[type=radio][value=matching]:checked") !== null;
  }
  function tick() {
    if (busy()) { setTimeout(tick, every); return; }
    fetch(live.dataset.live, { credentials: "same-origin", headers: { "X-Requested-With": "queuey-console" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html !== null && !busy()) { live.innerHTML = html; live.dataset.updated = String(Date.now()); }
      })
      .catch(function () {})
      .then(function () { setTimeout(tick, every); });
  }
  setTimeout(tick, every);
})();
