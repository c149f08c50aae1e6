// durable dashboard: live updates of a running run's page. Data from the
// server is only ever inserted as text (textContent), or as HTML that the
// server rendered and escaped itself.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live || !window.EventSource) return;
  var params = new URLSearchParams();
  params.set("id", live.dataset.id);
  params.set("version", document.getElementById("refresh").dataset.version || "");
  document.querySelectorAll("ol.entries").forEach(function (ol) {
    params.set("from." + ol.dataset.key, ol.dataset.next || "0");
  });
  var es = new EventSource(live.dataset.url + "?" + params.toString());
  var refreshing = false, again = false;

  function refresh(done) {
    if (refreshing) { again = true; return; }
    refreshing = true;
    fetch(window.location.href, { credentials: "same-origin" }).then(function (r) {
      if (!r.ok) throw new Error(r.status);
      return r.text();
    }).then(function (html) {
      var doc = new DOMParser().parseFromString(html, "text/html");
      var fresh = doc.getElementById("refresh"), old = document.getElementById("refresh");
      // Swap the sections only when the run changed: a swap under the
      // pointer would swallow a click on a button.
      if (fresh && old && fresh.dataset.version !== old.dataset.version) {
        old.replaceWith(document.importNode(fresh, true));
      }
      if (done || !doc.getElementById("live")) {
        es.close();
        document.querySelectorAll(".live-dot").forEach(function (e) { e.remove(); });
      }
    }).catch(function () {}).finally(function () {
      refreshing = false;
      if (again) { again = false; refresh(done); }
    });
  }

  es.addEventListener("entry", function (ev) {
    var e = JSON.parse(ev.data);
    var ol = document.querySelector('ol.entries[data-key="' + CSS.escape(e.key) + '"]');
    if (!ol) return;
    var next = parseInt(ol.dataset.next || "0", 10);
    if (e.offset < next) return; // seen already (a reconnect replays)
    ol.dataset.next = String(e.offset + 1);
    var li = document.createElement("li");
    li.dataset.offset = String(e.offset);
    var at = document.createElement("span");
    at.className = "mono muted";
    at.textContent = e.at;
    li.appendChild(at);
    li.appendChild(document.createTextNode(" " + e.summary));
    ol.appendChild(li);
    while (ol.children.length > 2000) ol.removeChild(ol.firstChild);
    ol.scrollTop = ol.scrollHeight;
  });
  es.addEventListener("changed", function () { refresh(false); });
  es.addEventListener("finished", function () { es.close(); refresh(true); });
})();
