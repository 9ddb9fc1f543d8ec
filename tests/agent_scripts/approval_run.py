"""An agent whose `deploy` tool needs approval, its model calls journaled (one process).

    python approval_run.py JOURNAL first          -> prints the pending call ids (JSON)
    python approval_run.py JOURNAL approve ID...  -> prints the result (JSON)

Run twice, in two processes: the second replays the first's model call from the journal
(same call, same id) and goes on with the approval.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio

from swarm import Agent, Finish, tool
from swarm.run._replay import ReplayModel
from swarm.run.journal import Journal
from swarm.testing import ScriptedModel, call

DEPLOYED: list[str] = []


@tool(requires_approval=True)
def deploy(env: str) -> str:
    """Deploy to an environment."""
    DEPLOYED.append(env)
    return f"deployed to {env}"


@tool
def finish(summary: str) -> None:
    """Finish."""
    raise Finish(summary)


async def main(journal_path: Path, mode: str, ids: list[str]) -> None:
    with Journal.open(journal_path) as journal:
        if journal.get_run("r1") is None:
            journal.create_run("r1", task={"title": "deploy"}, repo=".", config={})
        if mode == "first":  # the live model: asks to deploy
            inner = ScriptedModel([call("deploy", env="prod")])
        else:  # after a restart only the second call may reach the model
            inner = ScriptedModel([call("finish", summary="shipped")])
        model = ReplayModel(inner, journal, run_id="r1", key="ops")
        agent: Agent[str] = Agent("ops", model, tools=[deploy, finish])
        approvals = dict.fromkeys(ids, True)
        result = await agent.run("ship it", approvals=approvals)
        print(
            json.dumps(
                {
                    "stop_reason": result.stop_reason,
                    "pending": [c.id for c in result.pending],
                    "output": result.output,
                    "deployed": DEPLOYED,
                    "replayed": model.replayed,
                }
            )
        )


if __name__ == "__main__":
    anyio.run(main, Path(sys.argv[1]), sys.argv[2], sys.argv[3:])
