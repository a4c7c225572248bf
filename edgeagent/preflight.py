"""What ``fedplane agent`` checks before it starts, so a bad setting is named instead of a traceback.

The configuration's own shape and ranges are :mod:`edgeagent.config`'s to check; this module
looks at what a start would touch outside it: the gossip key file, the data directory, the
ports it binds, and — when the back end answers — whether the back end knows this node.
``--check`` runs all of it; a plain start runs the local part and stops at the first problem.
"""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

from edgeagent.clusters import ClusterUnavailable, UnknownNode
from edgeagent.config import AgentConfig
from gossip.config import split_addr
from gossip.keyring import KeyringError, read_keys

BACKEND_CHECK_TIMEOUT = 3.0
"""Seconds ``--check`` waits for the back end before reporting it unreachable (not an error)."""


def local_problems(config: AgentConfig, ports: bool = True) -> list[str]:
    """Every problem with the key file, data directory and (``ports``) listening addresses, each naming its setting."""
    problems = []
    if config.gossip.key_file:
        try:
            read_keys(config.gossip.key_file)
        except KeyringError as exc:
            problems.append(f"gossip.key_file: {exc}")
    if config.wan.key_file:
        try:
            read_keys(config.wan.key_file)
        except KeyringError as exc:
            problems.append(f"wan.key_file: {exc}")
    if config.tls.enabled:
        from fedapi.agentlink import tls_context

        try:
            tls_context(config.tls.cert, config.tls.key, config.tls.ca, server=False)
        except ValueError as exc:
            problems.append(f"tls: {exc}")
    if config.backend.credentials:
        problem = credentials_problem(config)
        if problem:
            problems.append(f"backend.credentials: {problem}")
    problem = data_dir_problem(config.data_path)
    if problem:
        problems.append(f"data_dir: {problem}")
    kubeconfig = config.backend.kubeconfig
    if config.backend.kind == "kubernetes" and kubeconfig and not os.access(kubeconfig, os.R_OK):
        problems.append(f"backend.kubeconfig: {kubeconfig}: no such readable file")
    if ports:
        problems += port_problems(config)
    return problems


def credentials_problem(config: AgentConfig) -> str | None:
    """Why the agent's credential file would be refused (None: it is one for this agent's cluster and node)."""
    from fedapi import credentials

    try:
        found = credentials.read(config.backend.credentials)
    except ValueError as exc:
        return str(exc)
    if found.role != "agent":
        return f"{config.backend.credentials} is a {found.role} credential; an agent needs one of role agent"
    if found.cluster != config.cluster:
        return f"{config.backend.credentials} is for cluster {found.cluster!r}, this agent's is {config.cluster!r}"
    if found.node and found.node != config.node_name:
        return f"{config.backend.credentials} is for node {found.node!r}, this agent is {config.node_name!r}"
    return None


def data_dir_problem(path: Path) -> str | None:
    """Why the agent could not keep its journal in ``path`` (None: it can, creating it if need be)."""
    if path.exists():
        if not path.is_dir():
            return f"{path} exists and is not a directory"
        if not os.access(path, os.W_OK | os.X_OK):
            return f"{path} is not writable"
        return None
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return f"{path} cannot be created: {parent} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{path} does not exist and cannot be created in {parent} (not writable)"
    return None


def port_problems(config: AgentConfig) -> list[str]:
    """Addresses the agent listens on that are taken or not local (gossip: UDP and TCP; HTTP: TCP)."""
    wanted = [("gossip.bind", config.gossip.bind, (socket.SOCK_DGRAM, socket.SOCK_STREAM))]
    if config.http.bind:
        wanted.append(("http.bind", config.http.bind, (socket.SOCK_STREAM,)))
    if config.wan.bind:
        wanted.append(("wan.bind", config.wan.bind, (socket.SOCK_DGRAM, socket.SOCK_STREAM)))
    problems = []
    for name, address, kinds in wanted:
        host, port = split_addr(address)
        if port == 0:
            continue
        for kind in kinds:
            try:
                family = socket.AF_INET6 if ":" in host else socket.AF_INET
                with socket.socket(family, kind) as probe:
                    if kind == socket.SOCK_STREAM:
                        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    probe.bind((host, port))
            except OSError as exc:
                proto = "UDP" if kind == socket.SOCK_DGRAM else "TCP"
                problems.append(f"{name}: cannot listen on {address} ({proto}): {exc.strerror or exc}")
                break
    return problems


async def backend_answer(config: AgentConfig) -> tuple[str | None, str]:
    """(problem, note): whether the back end knows this node; unreachable is a note, not a problem."""
    from edgeagent.daemon import make_cluster

    where = config.backend.address if config.backend.kind == "twin" else "the Kubernetes API server"
    try:
        cluster = make_cluster(config)
    except Exception as exc:  # the kubernetes client raises its own types for a config it cannot use
        if config.backend.kubeconfig:
            return f"backend.kubeconfig: {config.backend.kubeconfig}: unusable ({str(exc)[:160]})", ""
        return None, f"no in-cluster Kubernetes credentials here ({str(exc)[:120]}): node {config.node_name!r} not checked"
    try:
        node = await asyncio.wait_for(cluster.describe_node(config.node_name), BACKEND_CHECK_TIMEOUT)
    except UnknownNode as exc:
        return f"node: {exc}", ""
    except (ClusterUnavailable, asyncio.TimeoutError, OSError) as exc:
        return None, f"back end {where} unreachable ({str(exc)[:120] or 'timed out'}): node {config.node_name!r} not checked"
    finally:
        await cluster.close()
    return None, f"back end {where} knows node {node.name} ({node.cpu_milli}m CPU, {node.memory_mib} MiB, {node.gpus} GPU)"
