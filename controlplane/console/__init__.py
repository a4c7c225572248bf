"""The control plane's web console: server-rendered pages an operator reads without JavaScript, live on top.

:mod:`~controlplane.console.snapshots` copies what the plane knows into plain frozen values (one lock, one
clock reading); :mod:`~controlplane.console.pages` turns a snapshot into HTML regions with pure functions
(:mod:`~controlplane.console.markup` holds the escaping, tables and charts); :mod:`~controlplane.console.serving`
is the thin HTTP shell: authentication, the pages, and ``/events``, which streams the regions that changed.
"""
