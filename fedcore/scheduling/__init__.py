"""A scheduler shaped like the Kubernetes scheduling framework, vectorised over a :class:`~fedcore.nodetable.NodeTable`.

Filter plugins drop nodes that cannot host a pod; score plugins rank the rest; a profile
is a named set of both. An unschedulable pod is a :class:`~fedcore.scheduling.framework.Status`
value with reasons, never an exception.
"""
