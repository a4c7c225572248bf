"""Predictive autoscaling: series, forecasters, controllers (HPA, KEDA-, KPA-like, forecast-fed, learned), a simulator.

Sans-IO throughout — time is the simulator's or the caller's. ``benchmarking`` runs every
controller side by side for ``fedplane bench autoscale``; ``training`` (the ``train`` extra)
fits the learned residual.
"""
