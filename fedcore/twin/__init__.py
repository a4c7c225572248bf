"""The digital twin: deterministic simulations of regions, clusters and nodes driven by traces.

``submission`` reproduces the openb submission-order protocol; ``replay`` is a
discrete-event time replay (DLRM or synthetic) with fault injection.
"""
