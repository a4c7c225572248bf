"""Starting the agent: what ``fedplane agent`` runs, reachable without click.

An edge daemon lives for months on a small board, and every module it imports stays
resident: click and its dependencies are ~1.1 MiB of the agent's RSS (measured with
tracemalloc) for parsing two options once. So the ``fedplane`` executable hands the
plain forms — ``agent --config PATH [--check]`` — straight to :func:`run_from_argv`,
and anything else (``--help``, a typo, a bad configuration) to the click command in
:mod:`edgeagent.commands`, which prints the usage and help every other command has.
Both end in :func:`run`.
"""

from __future__ import annotations

import os

os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")  # onnxruntime's telemetry would write outside data_dir
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # the agent does no linear algebra worth a BLAS thread pool
os.environ.setdefault("OMP_NUM_THREADS", "1")

import sys
from collections.abc import Sequence

from edgeagent import config as agent_config


def run_from_argv(args: Sequence[str]) -> bool:
    """Run ``fedplane agent`` for ``--config PATH [--check]``; False (nothing done) for any other arguments."""
    path: str | None = None
    check = False
    rest = iter(args)
    for arg in rest:
        if arg == "--check":
            check = True
        elif arg == "--config":
            path = next(rest, None)
        elif arg.startswith("--config="):
            path = arg.partition("=")[2]
        else:
            return False
    if not path:
        return False
    sys.modules.setdefault("yaml._yaml", None)  # type: ignore[arg-type]  # safe_load is pure Python: libyaml's binding, 0.2 MiB, is never called
    try:
        config = agent_config.load(path)
    except agent_config.ConfigError:
        return False  # the click command reports it, with the usage line
    run(config, path, check)
    return True


def without_openssl() -> None:
    """Keep OpenSSL out of a process that speaks no TLS: ~4.9 MiB of RSS (``_ssl``, ``_hashlib``, and the
    pages of libssl and libcrypto that OpenSSL's initialisation touches), measured on ``fedplane bench agent``.

    asyncio imports ``ssl`` only in case a transport asks for TLS, and ``hashlib`` falls back to
    CPython's own md5/sha1/sha2 (faster than OpenSSL's for the short keys Bloom digests hash:
    1.0 vs 2.6 us per sha256) when ``_hashlib`` does not import. Marking both absent before they
    load is how those imports fail. The twin back end speaks plain TCP and gossip authenticates
    with libsodium (PyNaCl; no OpenSSL), so only the Kubernetes back end
    (HTTPS to the API server) needs them, and this is not called for it."""
    for name in ("ssl", "_hashlib"):
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]


def run(config: agent_config.AgentConfig, path: str, check: bool) -> None:
    """Run the daemon until SIGTERM; with ``check``, check everything a start would touch, say what, then return.

    A problem a start would trip on (key file, data directory, a taken port, a node the back
    end does not know) ends the process with its setting named and exit status 2."""
    if config.backend.kind == "twin" and not config.tls.enabled:
        without_openssl()
    import asyncio
    import logging

    from edgeagent import colocation, preflight
    from edgeagent.clusters import UnknownNode
    from edgeagent.daemon import run_agent
    from edgeagent.policy import ModelWatcher

    problems = preflight.local_problems(config, ports=check)
    isolated = colocation.check(config.isolation, config.backend.kind == "kubernetes")
    problems += [isolated[0]] if isolated[0] else []
    if check:
        problem, note = asyncio.run(preflight.backend_answer(config))
        problems += [problem] if problem else []
    if problems:
        for problem in problems:
            print(f"fedplane agent: {path}: {problem}", file=sys.stderr)
        sys.exit(2)
    if check:
        models = ModelWatcher(config.models_path, config.shipped_model)
        scorer = models.scan()
        if scorer is None:
            policy = f"no usable model in {config.models_path}: heuristic scoring"
        elif scorer.version.startswith("heuristic"):
            policy = f"no onnxruntime on this machine: heuristic scoring ({scorer.version}, features of model {models.current})"
        else:
            policy = f"policy model {scorer.version}"
        print(f"{path}: ok; {policy}; {note}; {isolated[1]}")
        return
    logging.basicConfig(level=config.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(run_agent(config))
    except UnknownNode as exc:
        print(f"fedplane agent: {path}: node: {exc} (set `node:` to a node the back end knows)", file=sys.stderr)
        sys.exit(2)
    except OSError as exc:  # a port another process holds (gossip.bind, wan.bind, http.bind), an unwritable data_dir
        print(f"fedplane agent: {path}: cannot start: {exc} (`fedplane agent --config {path} --check` names the setting)",
              file=sys.stderr)
        sys.exit(2)
