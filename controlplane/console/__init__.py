"""The control plane's web console: server-rendered pages an operator reads without JavaScript, live on top.

:mod:`~controlplane.console.snapshots` copies what the plane knows into plain frozen values (one lock, one
clock reading, plane time moved to wall time); :mod:`~controlplane.console.pages` turns a snapshot into named
HTML regions with pure functions (:mod:`~controlplane.console.markup` holds the escaping, tables and the page
frame, :mod:`~controlplane.console.charts` the inline SVG); :mod:`~controlplane.console.serving` is the thin HTTP
shell: sign-in, the pages, and ``/events``, which streams the regions whose HTML changed to ``static/live.js``.
"""
