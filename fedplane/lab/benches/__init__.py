"""Benches: each prints its figures as JSON beside its baseline from the same run."""
