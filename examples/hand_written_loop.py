"""A hand-written loop (no AgentLoop): the official openai SDK and Handrail's gate.

A small CRM: `crm.find_contact` reads, `crm.update_email` writes and needs the user's
confirmation. `converse` renders the tools with the adapter, sends the conversation,
parses the calls, runs them through the gate and appends the assistant message, then
one tool message per call; it stops at a text answer or at plans awaiting a person.
`confirm_and_continue` is what the host runs once that person confirmed: the plan is
confirmed with their token and executed once, and the model is told so in the words
`AgentLoop.resume` uses. Any OpenAI-compatible server works (OpenAI, vLLM, Ollama,
llama.cpp); run as a script, it talks to a scripted server on 127.0.0.1 (no model).

    .venv/bin/python -m examples.hand_written_loop
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Annotated, Any

import openai
from pydantic import Field

from examples.scripted_openai import completion, scripted_chat_server
from handrail import (
    MODEL_INSTRUCTIONS,
    ConfirmationMode,
    ConfirmationPolicy,
    DataMarker,
    Envelope,
    ErrorCode,
    FromPrincipal,
    Handrail,
    IdempotencyMode,
    IdempotencyPolicy,
    Impact,
    Kind,
    NotFound,
    Principal,
    RedactionAction,
    RedactionPolicy,
    ResultPolicy,
    RiskLevel,
    SideEffect,
    ToolContext,
    tool,
)
from handrail.adapters import OpenAIChatAdapter
from handrail.adapters.transcript import AssistantTurn

__all__ = ["SCRIPT", "Pending", "confirm_and_continue", "converse", "main", "run_demo"]

MAX_STEPS = 8
"""Model turns per `converse`: a loop you write needs its own bound."""

PLANNED = (ErrorCode.NEEDS_CONFIRMATION, ErrorCode.NEEDS_APPROVAL)

CONTACTS: dict[str, dict[str, dict[str, str]]] = {
    "acme": {"c-1": {"name": "Ana Lima", "email": "ana@old.example"}},
}


# --- the tools --------------------------------------------------------------------------------


@tool(risk=RiskLevel.L1_INTERNAL_READ, namespace="crm", permissions={"contacts.read"})
def find_contact(
    name: Annotated[str, Field(min_length=2, max_length=80, description="Part of the name")],
    tenant: Annotated[str, FromPrincipal("tenant_id")],
) -> list[dict[str, str]]:
    """Contacts whose name contains the words given: their ids and names."""
    return [
        {"contact_id": contact_id, "name": contact["name"]}
        for contact_id, contact in CONTACTS[tenant].items()
        if name.lower() in contact["name"].lower()
    ]


def _contact_exists(args: Any, ctx: ToolContext) -> None:  # noqa: ANN401
    if args.contact_id not in CONTACTS[ctx.principal.tenant_id]:
        raise NotFound("There is no such contact.")


def _impact(args: Any, ctx: ToolContext) -> Impact:  # noqa: ANN401, ARG001
    return Impact(action="change e-mail address", target=args.contact_id, reversible=True)


@tool(
    risk=RiskLevel.L2_REVERSIBLE_WRITE,
    namespace="crm",
    side_effect=SideEffect.EXTERNAL_WRITE,
    permissions={"contacts.write"},
    confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM),
    idempotency=IdempotencyPolicy(mode=IdempotencyMode.PLAN),
    validators=[_contact_exists],
    impact=_impact,
    # The model confirms the new address to the user: e-mail addresses stay visible.
    results=ResultPolicy(redaction=RedactionPolicy(actions={Kind.EMAIL: RedactionAction.KEEP})),
)
def update_email(
    ctx: ToolContext,
    contact_id: Annotated[str, Field(pattern=r"^c-\d+$")],
    email: Annotated[str, Field(max_length=254, pattern=r"^[^@\s]+@[^@\s]+$")],
) -> dict[str, str]:
    """Change a contact's e-mail address. The user confirms it in the application first."""
    CONTACTS[ctx.principal.tenant_id][contact_id]["email"] = email
    return {"contact_id": contact_id, "email": email}


# --- the loop ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Pending:
    """A plan one of the model's calls became, waiting for a person."""

    plan_id: str
    call_id: str
    tool: str


async def converse(
    client: openai.AsyncOpenAI,
    model: str,
    handrail: Handrail,
    principal: Principal,
    messages: list[dict[str, Any]],
) -> list[Pending]:
    """Drive the model until it answers in text ([]) or proposes plans (returned)."""
    adapter = OpenAIChatAdapter(strict=True)  # OpenAI strict mode; nulls removed on parse
    exposure = handrail.registry.exposure(principal)  # what this principal's model may see
    definitions = adapter.tool_definitions(exposure.included)
    for _ in range(MAX_STEPS):
        response = await client.chat.completions.create(
            model=model, messages=messages, tools=definitions.payload
        )
        calls = adapter.parse_calls(response, definitions=definitions)
        text = response.choices[0].message.content
        if not calls:
            messages.append({"role": "assistant", "content": text or ""})
            return []
        # The assistant message that made the calls goes first, then one tool message
        # per call, matched by id: OpenAI refuses tool messages without it.
        messages.extend(adapter.to_wire([AssistantTurn(text=text, calls=tuple(calls))]))
        envelopes = await handrail.handle_batch(calls, principal, exposure=exposure)
        messages.extend(adapter.render_results(calls, envelopes))
        pending = [
            Pending(plan_id=envelope.data["plan_id"], call_id=call.id, tool=envelope.tool)
            for call, envelope in zip(calls, envelopes, strict=True)
            if envelope.error_type in PLANNED and isinstance(envelope.data, dict)
        ]
        if pending:
            return pending  # show each plan to the user; the model cannot confirm it
    msg = f"no answer within {MAX_STEPS} model turns"
    raise RuntimeError(msg)


def confirmed_text(pending: Pending, envelope: Envelope) -> str:
    """The user turn that tells the model a person confirmed a plan, and its result.

    The words `AgentLoop.resume` uses; the result travels in a data block.
    """
    return (
        f"[handrail] The user confirmed plan {pending.plan_id} (proposed by call "
        f"{pending.call_id} of {pending.tool}) in the application, and it was "
        f"submitted. Its result, for call {pending.call_id}, follows.\n"
        f"{DataMarker().mark(envelope)}"
    )


async def confirm_and_continue(
    client: openai.AsyncOpenAI,
    model: str,
    handrail: Handrail,
    principal: Principal,
    messages: list[dict[str, Any]],
    *,
    pending: Pending,
    token: str,
) -> list[Pending]:
    """Confirm a plan with the person's token, execute it once, tell the model, go on.

    The call's earlier NEEDS_CONFIRMATION tool message stays as it was; the outcome
    (ok, or a refusal such as PLAN_EXPIRED or VERSION_CONFLICT) follows as a user turn.
    """
    await handrail.writes.confirm(pending.plan_id, token, principal)  # raises if refused
    outcome = await handrail.writes.execute_plan(
        pending.plan_id, principal, call_id=pending.call_id
    )
    messages.append({"role": "user", "content": confirmed_text(pending, outcome.envelope)})
    return await converse(client, model, handrail, principal, messages)


# --- the demo ---------------------------------------------------------------------------------

SCRIPT = (
    completion(("call_1", "crm__find_contact", {"name": "Ana"})),
    completion(("call_2", "crm__update_email", {"contact_id": "c-1", "email": "ana@new.example"})),
    completion(text="Done: Ana Lima's e-mail address is now ana@new.example."),
)
"""What the scripted server answers, in order: a read, a write, then text."""

ANA = Principal(
    user_id="ana",
    tenant_id="acme",
    permissions=frozenset({"contacts.read", "contacts.write"}),
)


async def run_demo(base_url: str) -> list[dict[str, Any]]:
    """One conversation against the server at `base_url`; the messages it ends with."""
    client = openai.AsyncOpenAI(base_url=base_url, api_key="not-needed", max_retries=0)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": MODEL_INSTRUCTIONS},
        {"role": "user", "content": "Change Ana's e-mail address to ana@new.example."},
    ]
    # A durable store and `keyring=Keyring.from_env()` in an application; "memory://"
    # draws a key for this process.
    async with Handrail.open("memory://", registry=[find_contact, update_email]) as handrail:
        pending = await converse(client, "scripted", handrail, ANA, messages)
        for plan in pending:
            # The host's UI shows the plan to Ana; her "yes" comes back with this token.
            token = await handrail.writes.issue_token(plan.plan_id, ANA)
            pending = await confirm_and_continue(
                client, "scripted", handrail, ANA, messages, pending=plan, token=token.value
            )
    await client.close()
    return messages


def main() -> None:
    """Run the demo against the scripted server and print the conversation's roles."""
    with scripted_chat_server(SCRIPT) as server:
        messages = asyncio.run(run_demo(server.base_url))
    for message in messages:
        print(message["role"], "-", str(message.get("content") or message.get("tool_calls"))[:90])


if __name__ == "__main__":
    main()
