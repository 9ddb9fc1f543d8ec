"""A solve run: from task file to branch, patch and report.

The rooms: `_run` (the `Run`: id, repository, journal, budget, tracing, progress, router),
`_task` and `_plan` (the contracts), `_seams` (what a run plugs in), `_coordinator` (the
dispatch, with `_dispatch`, `_agent_factory` and `_fix_loop`), `_roles` (prompts),
`_workspace/` (git worktrees and their pool), `_check`, `_merge/` (the merge queue),
`journal` (SQLite state, replay), `_report` (the typed report), `_solve` (`swarm solve`
and `swarm resume`).

A glossary of the run's nouns:

- *task*: the user's task file (title, instructions, `check:`, budget); *plan*: the
  planner's subtasks with their files and `depends_on`; *subtask*: one unit of work, coded
  by one coder in one workspace.
- *workspace*: a git worktree at a base commit where one agent works; its *patch* is what
  it changed. *integration branch*: `swarm/<run-id>`, where green patches land.
- *check*: the repository's own test command; *impact*: the part of it a patch reaches;
  *accept*: the command that decides "done" at the end (final verification).
- *coder*, *fixer*, *rebase fixer*: the agents' roles; a fixer gets a red check or a
  patch that no longer applies on the new head.
- *merge queue*: lands green patches in checked batches (`_merge/`); *landed*: on the
  integration branch.
- *run*: one `Run` (`_run`): its id, journal, budget, progress, router and the agents'
  models, opened with `async with`; the coordinator and the agents it makes use it as a
  `RunLike` (`_seams`: tests give an in-memory one). *run options*: `RunOptions`, its knobs
  (agents at once, steps, fix, rebase, plan and retry rounds, the merge queue's config).
- *world*: what a run acts on (`World`): the real repository, or a simulated one; it gives
  the run its *seams* (`Seams`: the workspaces, the check, the environment and the tools
  agents get), its merge queue, base commit and result.
- *dispatch*: the coordinator's state while it starts subtasks (`_dispatch`: every
  outcome, what merged and finished, the agents' places, what stopped the run); *agent
  factory*: makes every agent of a run with its role's model, tools and context
  (`_agent_factory`, which also runs the planner); *fix loop*: a subtask's own check in its
  workspace and the fixer rounds until it is green (`_fix_loop`).
- *live path*: the plan's critical path as the run goes, with the finish estimate;
  *slack*: how late a subtask may be without moving the finish.
- *journal*: SQLite with every completed model call and subtask state, so a resumed run
  pays for nothing twice; *outcome*: a subtask's progress; *report*: how the run ended.
"""
