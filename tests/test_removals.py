"""What a coder's patch removes that nobody asked for (`swarm.run._removals`)."""

from __future__ import annotations

from swarm.run._removals import Removal, removed_definitions, unasked_removals

PATCH = """\
diff --git a/pkg/a.py b/pkg/a.py
--- a/pkg/a.py
+++ b/pkg/a.py
@@ -1,9 +1,3 @@
-def kept():
+def kept() -> int:
     return 1
-
-
-async def gone():
-    pass
-class Moved:
-    pass
-    def method(self): ...
diff --git a/pkg/b.py b/pkg/b.py
--- a/pkg/b.py
+++ b/pkg/b.py
@@ -0,0 +1,2 @@
+class Moved:
+    pass
diff --git a/old.py b/old.py
deleted file mode 100644
--- a/old.py
+++ /dev/null
@@ -1,2 +0,0 @@
-def helper():
-    return 2
diff --git a/notes.md b/notes.md
--- a/notes.md
+++ b/notes.md
@@ -1 +0,0 @@
-def not_python(): a markdown line
"""


def test_top_level_definitions_deleted_and_defined_nowhere_else_are_removed() -> None:
    assert removed_definitions(PATCH) == [Removal("pkg/a.py", "gone"), Removal("old.py", "helper")]


def test_a_removal_the_instructions_name_was_asked_for() -> None:
    assert unasked_removals(PATCH, "Fold helper into its caller.") == [Removal("pkg/a.py", "gone")]
    assert unasked_removals(PATCH, "helper", "gone, the dead code") == []
