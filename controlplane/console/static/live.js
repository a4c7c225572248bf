// Live updates for the console's server-rendered pages: one EventSource per page (/events?path=...), each
// message carrying the HTML of the regions that changed; a region is replaced in place, nothing reloads.
// The page reads the same without this file.
(function () {
  "use strict";
  var path = document.body.getAttribute("data-live");
  var badge = document.getElementById("live");
  if (!path || !window.EventSource || !badge) { return; }
  var source = new EventSource("/events?path=" + encodeURIComponent(path));
  source.onopen = function () { badge.className = "on"; badge.textContent = "live"; };
  source.onerror = function () {
    badge.className = "off";
    badge.textContent = source.readyState === EventSource.CLOSED ? "signed out: reload" : "reconnecting";
  };
  source.onmessage = function (event) {
    var message = JSON.parse(event.data);
    Object.keys(message.regions).forEach(function (name) {
      var region = document.getElementById("r-" + name);
      if (region) { region.innerHTML = message.regions[name]; }
    });
    badge.className = "on";
    badge.textContent = "live " + message.clock + "Z";
  };
}());
