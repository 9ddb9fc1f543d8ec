"""A solve run: from task file to branch, patch and report.

`run` (the `Run`: id, repository, journal, budget, tracing, progress, router), `task` and
`plan` (the contracts), `coordinator` (dispatch, the fix loop), `roles` (prompts),
`workspace` (git worktrees), `check`, `merge` (the merge queue), `journal` (SQLite state,
replay), `report` (the typed report), `solve` (`swarm solve` and `swarm resume`).
"""
