"""The agents' link carrying the learning loop: the TwinCluster servicer plus ``FetchModel`` (models from the plane's
:mod:`federated.flower.shelf` to agents) and ``ShipExperience`` (agents' experience rows into its :mod:`experienceinbox`).

Why calls on the agents' link (and not a file server or the SuperLink): the link already reaches every agent that
binds pods, through the same leader following, mTLS and credentials (an agent's credential fetches and ships only
for its own cluster and node), and it keeps gRPC and protobuf off the agent. A bundle travels in chunks well under the link's
frame limit; an agent asks for one only when the offer names a version it lacks, so a fleet on its current model
costs one small answer per agent per poll.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from controlplane.campaigning import Leadership, Solo
from controlplane.experienceinbox import ExperienceInbox
from federated.flower.shelf import Assignment, Change, ModelShelf, Note, changes
from controlplane.registry import DecisionRecord
from controlplane.runtime import ControlPlane
from controlplane.service import TwinClusterService
from fedapi import twincluster_pb2 as tw
from federated.runtime.modelbundles import Signed

CHUNK = 512 * 1024
"""Bundle bytes per answer (a link frame may carry 16 MiB; smaller chunks keep other calls on the connection moving)."""


def recorder(plane: ControlPlane) -> Change:
    """The shelf's changes as the plane's decisions (one log line each and ``controlplane decisions``)."""

    def record(old: Assignment, new: Assignment) -> None:
        for kind, version, why in changes(old, new):
            plane._record(DecisionRecord(plane.clock(), kind, "", "", version, (why,)))

    return record


def noter(plane: ControlPlane) -> Note:
    """The rounds service's own events (started, a run ended, stopped) as the plane's decisions."""

    def record(kind: str, subject: str, why: str) -> None:
        plane._record(DecisionRecord(plane.clock(), kind, "", "", subject, (why,)))

    return record


def _signed(model: Signed | None) -> tw.SignedModel:
    if model is None:
        return tw.SignedModel()
    return tw.SignedModel(version=model.version, sha256=model.sha256, size=model.size, signature=model.signature)


async def fetch_model(shelf: ModelShelf | None, request: tw.FetchModelRequest, context: Any) -> tw.ModelOffer:
    """``FetchModel`` from ``shelf`` (None: UNIMPLEMENTED, the agent stops asking); a test harness serves it too."""
    if shelf is None:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this plane ships no models (serve --models DIR)")
    offer = shelf.offer(request.cluster, request.node)
    chunk = b""
    if request.want:
        if request.want not in {m.version for m in (offer.current, offer.canary) if m is not None}:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"model {request.want[:40]!r} is not offered to this agent now")
        if request.offset < 0:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"offset must be >= 0, not {request.offset}")
        chunk = shelf.chunk(request.want, request.offset, CHUNK)
    return tw.ModelOffer(current=_signed(offer.current), canary=_signed(offer.canary), canary_weight=offer.weight,
                         signer=shelf.signer, chunk=chunk, offset=request.offset)


async def ship_experience(inbox: ExperienceInbox | None, request: tw.ExperienceBatch, context: Any) -> tw.ExperienceAck:
    """``ShipExperience`` into ``inbox`` (None: UNIMPLEMENTED, the agent keeps its rows)."""
    if inbox is None:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this plane holds no experience (serve --experience DIR)")
    try:
        expected = await asyncio.to_thread(inbox.take, request.cluster, request.node, request.first_seq, request.frames, request.body)
    except ValueError as exc:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc)[:500])
    return tw.ExperienceAck(next_seq=expected)


class LearningTwin(TwinClusterService):
    """:class:`TwinClusterService` with :func:`fetch_model` from ``shelf`` and :func:`ship_experience` into ``inbox``."""

    def __init__(self, plane: ControlPlane, leadership: Leadership = Solo(), shelf: ModelShelf | None = None,
                 inbox: ExperienceInbox | None = None) -> None:
        super().__init__(plane, leadership)
        self.shelf, self.inbox = shelf, inbox

    async def FetchModel(self, request: tw.FetchModelRequest, context: Any) -> tw.ModelOffer:
        return await fetch_model(self.shelf, request, context)

    async def ShipExperience(self, request: tw.ExperienceBatch, context: Any) -> tw.ExperienceAck:
        return await ship_experience(self.inbox, request, context)
