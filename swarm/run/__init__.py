"""A solve run: from task file to branch, patch and report.

The rooms: `_run` (the `Run`: id, repository, journal, budget, tracing, progress, router),
`_task` and `_plan` (the contracts), `_coordinator` (dispatch, the fix loop), `_roles`
(prompts), `_workspace/` (git worktrees and their pool), `_check`, `_merge/` (the merge
queue), `journal` (SQLite state, replay), `_report` (the typed report), `_solve` (`swarm
solve` and `swarm resume`).

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
- *board*: the coordinator's dispatch state; *staff*: who builds agents for a role;
  *crew*, *parts*: what the coordinator is given (workspaces, checker, merger, staff).
- *live path*: the plan's critical path as the run goes, with the finish estimate;
  *slack*: how late a subtask may be without moving the finish.
- *journal*: SQLite with every completed model call and subtask state, so a resumed run
  pays for nothing twice; *outcome*: a subtask's progress; *report*: how the run ended.
"""
