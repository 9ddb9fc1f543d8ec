"""Span names and attribute keys: OpenTelemetry GenAI conventions plus swarm's own.

The GenAI conventions are still in development, so we keep our own constants and emit
current names only (`gen_ai.provider.name`, not `gen_ai.system`). See TRACING.md.
"""

from __future__ import annotations

# operations (the first word of span names)
OP_WORKFLOW = "invoke_workflow"
OP_AGENT = "invoke_agent"
OP_CHAT = "chat"
OP_TOOL = "execute_tool"
WAIT_SPAN = "swarm.wait"
WORKSPACE_SPAN = "swarm.workspace"
"""`swarm.workspace open` / `close`: making a worktree ready (incl. `setup:`), removing it."""
OP_WORKSPACE = "workspace"
MERGE_SPAN = "swarm.merge"
REMOTE_SPAN = "swarm.remote"
"""A call to a workspace on a cluster node (`swarm.cluster`): its round trip."""
"""`swarm.merge batch` (a batch built and checked), `swarm.merge split` (prefixes of a red
batch checked at once to find its culprit)."""
FIRST_TOKEN_EVENT = "First Token Stream Event"


def workflow_span_name(title: str, *, limit: int = 80) -> str:
    """`invoke_workflow {task title}`: the title on one line, cut to `limit` characters
    (`swarm` when there is none), so a run is told apart by name in Phoenix or Jaeger."""
    one_line = " ".join(title.split())
    if len(one_line) > limit:
        one_line = one_line[: limit - 1].rstrip() + "…"
    return f"{OP_WORKFLOW} {one_line or 'swarm'}"


# gen_ai.*
OPERATION = "gen_ai.operation.name"
WORKFLOW_NAME = "gen_ai.workflow.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
REQUEST_STREAM = "gen_ai.request.stream"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
FINISH_REASONS = "gen_ai.response.finish_reasons"
TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
REASONING_TOKENS = "gen_ai.usage.reasoning.output_tokens"
CACHED_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
AGENT_NAME = "gen_ai.agent.name"
AGENT_ID = "gen_ai.agent.id"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
SERVER_ADDRESS = "server.address"
ERROR_TYPE = "error.type"

# swarm.*
RUN_ID = "swarm.run.id"
ROLE = "swarm.role"
TIER = "swarm.tier"
SUBTASK_ID = "swarm.subtask.id"
STEP = "swarm.step"
ATTEMPTS = "swarm.attempt.count"
TTFT_S = "swarm.ttft_s"
DECODE_TPS = "swarm.decode.tokens_per_s"
COST_USD = "swarm.cost.usd"
SIMULATED = "swarm.simulated"
WAIT_KIND = "swarm.wait.kind"
TOOL_EXIT_CODE = "swarm.tool.exit_code"
TESTS_PASSED = "swarm.tests.passed"
TESTS_FAILED = "swarm.tests.failed"
LINK_TYPE = "swarm.link.type"
LINK_DEPENDS_ON = "depends_on"
HEDGE_WINNER = "swarm.hedge.winner"
HEDGE_REASON = "swarm.hedge.reason"
HEDGE_OUTCOME = "swarm.hedge.outcome"
"""On a hedge arm's `chat` span: `lost` when another arm won and this one was cancelled
(status unset, no `error.type`: losing a race is not an error)."""
HEDGE_LOST = "lost"
ROUTE_REASON = "swarm.route.reason"
ROUTE_SCORES = "swarm.route.scores"
WORKSPACE_NAME = "swarm.workspace.name"
WORKSPACE_REUSED = "swarm.workspace.reused"
"""True on a workspace `open` that reset a finished subtask's worktree for the next."""
AGENT_STEPS = "swarm.agent.steps"
AGENT_STOP_REASON = "swarm.agent.stop_reason"
AGENT_COST_USD = "swarm.agent.cost_usd"
AGENT_OUTPUT_TOKENS = "swarm.agent.output_tokens"
TOOL_CALL_FORMAT = "swarm.tool_calls.format"
"""On a chat span: `native`, or the text format its tool calls were read from (`hermes`)."""
TOOL_CALLS_NATIVE = "swarm.tool_calls.native"
"""On an agent span, this and the next three: its calls that came in the API's field, were
read from text, needed a repair to read, and were refused (unknown tool, bad arguments,
unreadable)."""
TOOL_CALLS_PARSED = "swarm.tool_calls.parsed"
TOOL_CALLS_REPAIRED = "swarm.tool_calls.repaired"
TOOL_CALLS_REJECTED = "swarm.tool_calls.rejected"
AGENT_NUDGES = "swarm.agent.nudges"
"""Replies that made no call and were told the format to use."""
AGENT_TRUNCATED = "swarm.agent.truncated"
"""Replies cut by `max_tokens` (`finish_reason: length`)."""
AGENT_ESCALATED = "swarm.agent.escalated"
"""True when the agent, repeating itself, was moved to its fallback (reasoning) model."""
AGENT_REPEATED = "swarm.agent.repeated"
"""For a `stuck` agent: the reply it kept sending (cut to 500 characters)."""
CHECK_COMMAND = "swarm.check.command"
CHECK_PASSED = "swarm.check.passed"
IMPACT_SPAN = "swarm.check.impact"
"""A subtask's check in its worktree, scoped by test impact (`swarm.run._impact`): the
`run_tests` span is its child; it says which tests ran, or why all of them did."""
CHECK_TESTS_SELECTED = "swarm.check.tests_selected"
"""Test files the subtask's check ran: those its change reaches by imports."""
CHECK_TEST_FILES = "swarm.check.test_files"
"""Test files the whole check collects."""
CHECK_FULL_REASON = "swarm.check.full_reason"
"""Why the subtask's check ran the whole suite (the selection could not be trusted)."""
MERGE_BATCH_SIZE = "swarm.merge.batch.size"
MERGE_SPECULATIVE_DEPTH = "swarm.merge.speculative_depth"
"""Batches ahead of this one, still checking, when it was built on their tip (0: the head)."""
MERGE_ALTERNATE = "swarm.merge.alternate"
"""True on a batch built as if one batch ahead of it were red, ready in case it is."""
MERGE_PROBE = "swarm.merge.probe"
"""True on a batch checked alone on the head, outside the line, only to judge it."""
MERGE_OUTCOME = "swarm.merge.outcome"
"""`green`, `red`, or `cancelled` (a speculative batch whose batch ahead turned red)."""
MERGE_SUBTASKS = "swarm.merge.subtasks"
MERGE_SPLIT_DEPTH = "swarm.merge.split.depth"
REPLAYED = "swarm.replayed"
"""A result's extras key: answered from the journal, not by a model."""

# GenAI client metrics
METRIC_OPERATION_DURATION = "gen_ai.client.operation.duration"
METRIC_TOKEN_USAGE = "gen_ai.client.token.usage"
METRIC_TIME_TO_FIRST_CHUNK = "gen_ai.client.operation.time_to_first_chunk"
TOKEN_TYPE = "gen_ai.token.type"

# context management (swarm.agent.compaction)
COMPACTION_SPAN = "swarm.compaction"
"""One compaction of an agent's history; a summary's `chat` span is its child."""
COMPACTION_STRATEGY = "swarm.compaction.strategy"
"""`mask+recent`, `mask+summary`, ... (the strategy's name)."""
COMPACTION_TRIGGER = "swarm.compaction.trigger"
"""`threshold` (the request would pass the trigger point) or `overflow` (a provider's
400 said the request was over the window)."""
COMPACTION_TOKENS_BEFORE = "swarm.compaction.tokens_before"
COMPACTION_TOKENS_AFTER = "swarm.compaction.tokens_after"
COMPACTION_MESSAGES_BEFORE = "swarm.compaction.messages_before"
COMPACTION_MESSAGES_AFTER = "swarm.compaction.messages_after"
CONTEXT_WINDOW = "swarm.context.window"
"""The window (tokens) the agent fits its requests into."""

# swarm.wait.kind values
WAIT_QUEUE = "queue"
WAIT_RATE_LIMIT = "rate_limit"
WAIT_BACKOFF = "backoff"
WAIT_HEDGE = "hedge"
HEDGE_FIRST_TOKEN = "first_token"
"""A hedge started because no first token came (`swarm.hedge.reason`)."""
HEDGE_STALL = "stall"
"""A hedge started because a started stream fell silent."""
WAIT_DEPENDENCY = "dependency"
WAIT_MERGE = "merge"
WAIT_CHECK = "check"
WAIT_CLUSTER = "cluster"
"""A workspace waiting for room on the cluster (`swarm.cluster`)."""
"""A check waiting for one of the places that keep the machine from thrashing."""

# The content capture switch (opt-in) and its one rule live in `swarm._secrets`.

# swarm.sandbox.*: where a command ran, and what the sandbox refused (swarm.sandbox)
SANDBOX_KIND = "swarm.sandbox.kind"
HOST_NAME = "host.name"
"""The machine a tool or check ran on (OTel resource convention, here per span)."""
NODE_ID = "swarm.node.id"
"""The cluster node (Ray node id) a remote tool or check ran on."""
REMOTE_DURATION = "swarm.remote.duration_s"
"""Time a remote call spent on its node; the rest of the round trip is overhead."""
"""`bwrap` or `none`, on every span of a tool or check that ran a command."""
SANDBOX_DENIED = "swarm.sandbox.denied"
"""What the sandbox refused or stopped, a short sentence each (a write outside the
worktree, the network, too many processes)."""
