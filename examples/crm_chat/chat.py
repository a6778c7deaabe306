"""A console chat over the CRM: one message per process, the conversation kept in the store.

    export OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_API_KEY=...  # any compatible server
    export HANDRAIL_CONFIRMATION_KEYS=$(python -c \
        "from handrail import Keyring; print(Keyring.new_key_text('k1'))")
    python -m examples.crm_chat.chat --store chat.db --conversation chat-1 "What is Ada's email?"
    python -m examples.crm_chat.chat --store chat.db --conversation chat-1 "Change it to ..."
    handrail plans confirm PLAN_ID --app examples.crm_chat.app:build_registry \
        --store chat.db --tenant acme --user sam
    python -m examples.crm_chat.chat --store chat.db --conversation chat-1 --resume PLAN_ID

Each run opens Handrail on the store, builds an agent over the official `openai` SDK
(`--api responses`, the Responses API, or `--api chat`, Chat Completions) and streams
its events to the terminal: the model's text as it arrives, each tool call and its
result, a plan awaiting confirmation (its id and impact) and the final answer with
Handrail's evidence verdict. A write suspends the run; once a person confirmed the
plan out of band, `--resume PLAN_ID` executes it once and lets the model answer. No
confirmation token is ever issued here: the person's token stays in `plans confirm`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import aclosing
from typing import TextIO

from examples.crm_chat.app import build_tools, crm_from_env, crm_user
from handrail import Handrail, Keyring, Principal
from handrail.errors import HandrailError
from handrail.loop import (
    BudgetStopped,
    CallEnvelope,
    CallProposed,
    LoopEvent,
    ModelTextDelta,
    PlanAwaitingConfirmation,
    RunFailed,
    RunFinished,
    RunSuspended,
)
from handrail.loop.agent import read_run
from handrail.loop.models import OpenAICompatibleClient, OpenAIResponsesClient
from handrail.runs import RunState
from handrail.store.base import Store

__all__ = ["ChatError", "main", "suspended_run"]

APP = "examples.crm_chat.app:build_registry"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-4.1-mini"


class ChatError(Exception):
    """A request this program refuses before anything runs; printed on one line."""


# --- finding the run to resume ------------------------------------------------------------------


def suspended_run(store: Store, conversation_id: str, principal: Principal, plan_id: str) -> str:
    """The id of the conversation's suspended run that awaits `plan_id`.

    The conversation's last run is the only one that may be suspended (a conversation
    allows one open run at a time). Another principal's conversation is "not found".
    """
    conversation = store.get_conversation(conversation_id)
    if (
        conversation is None
        or conversation.tenant_id != principal.tenant_id
        or conversation.user_id != principal.user_id
    ):
        raise ChatError(f"no conversation {conversation_id!r}")
    record = None if conversation.run_id is None else store.get_run(conversation.run_id)
    if record is None or record.state is not RunState.SUSPENDED:
        raise ChatError(f"conversation {conversation_id!r} has no suspended run")
    if all(p.plan_id != plan_id for p in read_run(record).pending):
        raise ChatError(f"the suspended run {record.run_id} awaits no plan {plan_id!r}")
    return record.run_id


# --- printing the events ------------------------------------------------------------------------


def _safe(text: str) -> str:
    """Model and tool text for a terminal: control characters (escape codes) escaped."""
    return "".join(
        c if c in "\n\t" or (c.isprintable() and c != "\x7f") else f"\\x{ord(c):02x}" for c in text
    )


def _arguments(arguments: str | bytes | Mapping[str, object] | None) -> str:
    """A call's arguments as the provider sent them, as text."""
    if isinstance(arguments, bytes):
        return arguments.decode(errors="replace")
    if arguments is None or isinstance(arguments, str):
        return arguments or ""
    return json.dumps(arguments, ensure_ascii=False)


class _Screen:
    """Prints events as lines; the model's streamed text flows until the next line."""

    def __init__(self, out: TextIO, *, store: str, conversation: str, principal: Principal) -> None:
        self._out = out
        self._store = store
        self._conversation = conversation
        self._principal = principal
        self._streaming = False

    def line(self, text: str) -> None:
        if self._streaming:
            self._out.write("\n")
            self._streaming = False
        self._out.write(f"{text}\n")
        self._out.flush()

    def delta(self, text: str) -> None:
        if not self._streaming:
            self._out.write("model: ")
            self._streaming = True
        self._out.write(_safe(text))
        self._out.flush()

    def show(self, event: LoopEvent) -> None:
        match event:
            case ModelTextDelta(text=text):
                self.delta(text)
            case CallProposed(call=call):
                self.line(f"-> {_safe(call.name)} {_safe(_arguments(call.arguments))}")
            case CallEnvelope(envelope=envelope):
                status = envelope.error_type or envelope.status
                self.line(f"<- {status}: {_safe(envelope.summary)}")
            case PlanAwaitingConfirmation():
                self.plan(event)
            case RunSuspended(run_id=run_id, plan_ids=plan_ids):
                self.line(f"run {run_id} suspended, awaiting plan(s) {', '.join(plan_ids)}")
            case RunFinished(final=final) if final is not None:
                verdict = "verified" if final.verified else "NOT verified"
                state = final.state.value if final.state is not None else "text"
                claimed = final.claimed.value if final.claimed is not None else "-"
                self.line(f"answer [{state}, claimed {claimed}, {verdict}]: {_safe(final.message)}")
                if final.notice:
                    self.line(f"handrail: {final.notice}")
                if final.proven:
                    self.line(f"proven by: {', '.join(final.proven)}")
            case RunFinished(run_id=run_id):
                self.line(f"run {run_id} finished without an answer")
            case BudgetStopped(trip=trip):
                self.line(f"stopped by a budget: {trip}")
            case RunFailed(error=error):
                self.line(f"run failed: {error}")

    def plan(self, event: PlanAwaitingConfirmation) -> None:
        impact = dict(event.impact or {})
        notes = "; ".join(str(note) for note in impact.get("notes", ()))
        self.line(f"plan {event.plan_id} awaits {event.code.value} ({_safe(event.tool)})")
        self.line(
            f"  impact: {_safe(str(impact.get('action')))} of {_safe(str(impact.get('target')))}"
        )
        if notes:
            self.line(f"  {_safe(notes)}")
        if event.expires_at:
            self.line(f"  expires {event.expires_at}")
        who = f"--tenant {self._principal.tenant_id} --user {self._principal.user_id}"
        self.line(
            f"  confirm: handrail plans confirm {event.plan_id} --app {APP} "
            f"--store {self._store} {who}"
        )
        self.line(
            f"  then:    python -m examples.crm_chat.chat --store {self._store} "
            f"--conversation {self._conversation} {who} --resume {event.plan_id}"
        )


# --- the program --------------------------------------------------------------------------------


def _model(args: argparse.Namespace) -> OpenAICompatibleClient | OpenAIResponsesClient:
    api_key = os.environ.get("OPENAI_API_KEY")
    if not api_key:
        raise ChatError("set OPENAI_API_KEY (any text for a local server that ignores it)")
    base_url = args.base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
    if args.api == "chat":
        return OpenAICompatibleClient(base_url=base_url, api_key=api_key, model=args.model)
    return OpenAIResponsesClient(base_url=base_url, api_key=api_key, model=args.model)


async def chat(args: argparse.Namespace, out: TextIO) -> int:
    """One message (or one resume) of the conversation; 0 once it finished or suspended."""
    principal = crm_user(args.tenant, args.user)
    keyring = Keyring.from_env()  # the same keys in every process that shares the store
    crm = crm_from_env()
    crm.ensure()
    screen = _Screen(out, store=args.store, conversation=args.conversation, principal=principal)
    last: LoopEvent | None = None
    model = _model(args)
    try:
        async with Handrail.open(args.store, registry=build_tools(crm), keyring=keyring) as hr:
            loop = hr.agent(model)
            events: AsyncGenerator[LoopEvent, None]
            if args.resume is not None:
                run_id = args.run or await asyncio.to_thread(
                    suspended_run, hr.store, args.conversation, principal, args.resume
                )
                screen.line(f"resuming run {run_id} with confirmed plan {args.resume}")
                events = loop.resume_stream(run_id, principal, plan_id=args.resume, token=None)
            else:
                events = loop.stream(args.message, principal, conversation_id=args.conversation)
            async with aclosing(events) as stream:
                async for event in stream:
                    screen.show(event)
                    last = event
    finally:
        await model.aclose()
    return 0 if isinstance(last, RunFinished | RunSuspended) else 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m examples.crm_chat.chat", description="Chat with the CRM's agent."
    )
    parser.add_argument("message", nargs="?", help="What you say (not with --resume).")
    parser.add_argument("--store", required=True, help="Handrail's store: a SQLite path or URL.")
    parser.add_argument("--conversation", required=True, help="The chat's id, kept in the store.")
    parser.add_argument("--resume", metavar="PLAN_ID", help="Resume after a plan was confirmed.")
    parser.add_argument("--run", metavar="RUN_ID", help="The suspended run (found if omitted).")
    parser.add_argument("--api", choices=("responses", "chat"), default="responses")
    parser.add_argument("--model", default=os.environ.get("OPENAI_MODEL", DEFAULT_MODEL))
    parser.add_argument("--base-url", help="Default: $OPENAI_BASE_URL, else OpenAI's.")
    parser.add_argument("--tenant", default="acme", help="Signed-in user's tenant.")
    parser.add_argument("--user", default="sam", help="Signed-in user.")
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    """Parse the command line, chat once, print the events; the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if (args.message is None) == (args.resume is None):
        parser.error("give a message, or --resume PLAN_ID (not both)")
    try:
        return asyncio.run(chat(args, out))
    except (ChatError, HandrailError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
