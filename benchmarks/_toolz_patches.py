"""The real code `bench_merge_real` patches toolz with: new helpers (each with its test),
the first halves of semantic clash pairs, and tests of toolz's existing functions."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Feature:
    """New code appended to a module of the project, and a test of it."""

    module: str
    """Dotted name, e.g. `toolz.itertoolz`."""
    code: str
    test: str


# A semantic clash's first half: a module-level constant and a helper using it.
LIMITS = (
    Feature(
        "toolz.itertoolz",
        '''
SWARM_LIMIT = 2


def take_limited(seq):
    """ The first ``SWARM_LIMIT`` items of ``seq``

    >>> list(take_limited('abc'))
    ['a', 'b']
    """
    return take(SWARM_LIMIT, seq)
''',
        """from toolz.itertoolz import take_limited


def test_take_limited():
    assert list(take_limited([1, 2, 3])) == [1, 2]
    assert list(take_limited([])) == []
""",
    ),
    Feature(
        "toolz.dicttoolz",
        '''
SWARM_LIMIT = 2


def first_items(d, factory=dict):
    """ The first ``SWARM_LIMIT`` items of ``d``, in its order

    >>> first_items({'a': 1, 'b': 2, 'c': 3})
    {'a': 1, 'b': 2}
    """
    rv = factory()
    for key, value in d.items():
        if len(rv) == SWARM_LIMIT:
            break
        rv[key] = value
    return rv
''',
        """from toolz.dicttoolz import first_items


def test_first_items():
    assert first_items({"a": 1, "b": 2, "c": 3}) == {"a": 1, "b": 2}
    assert first_items({}) == {}
""",
    ),
    Feature(
        "toolz.functoolz",
        '''
SWARM_LIMIT = 2


def call_limited(func, *args, **kwargs):
    """ Call ``func`` with at most ``SWARM_LIMIT`` positional arguments

    >>> call_limited(max, 1, 5, 9)
    5
    """
    return func(*args[:SWARM_LIMIT], **kwargs)
''',
        """from toolz.functoolz import call_limited


def test_call_limited():
    assert call_limited(max, 1, 5, 9) == 5
    assert call_limited(sorted, [3, 1], reverse=True) == [3, 1]
""",
    ),
    Feature(
        "toolz.recipes",
        '''
SWARM_LIMIT = 2


def top_counts(key, seq):
    """ The ``SWARM_LIMIT`` most common keys of ``seq``, with their counts

    >>> top_counts(len, ['a', 'bb', 'c', 'dd', 'e'])
    [(1, 3), (2, 2)]
    """
    counts = countby(key, seq)
    return sorted(counts.items(), key=lambda kv: -kv[1])[:SWARM_LIMIT]
''',
        """from toolz.recipes import top_counts


def test_top_counts():
    assert top_counts(len, ["a", "bb", "c", "dd", "e", "fff"]) == [(1, 3), (2, 2)]
""",
    ),
)

# Plain new helpers, one per module (a module a clash uses is left to the clash).
HELPERS = (
    Feature(
        "toolz.functoolz",
        '''

def compose_all(funcs):
    """ Compose an iterable of functions, applied right to left like ``compose``

    >>> inc = lambda i: i + 1
    >>> compose_all([str, inc])(3)
    '4'
    """
    return compose(*funcs)
''',
        """from toolz.functoolz import compose_all


def test_compose_all():
    assert compose_all([str, lambda i: i + 1])(3) == "4"
    assert compose_all([])(7) == 7
""",
    ),
    Feature(
        "toolz.recipes",
        '''

def most_common(seq):
    """ The most frequent item of ``seq`` (the first seen among ties)

    >>> most_common(['a', 'b', 'b', 'c'])
    'b'
    """
    counts = frequencies(seq)
    return max(counts, key=counts.__getitem__)
''',
        """from toolz.recipes import most_common


def test_most_common():
    assert most_common("abbc") == "b"
    assert most_common([3, 1, 1, 3]) == 3
""",
    ),
    Feature(
        "toolz.utils",
        '''

def is_no_default(value):
    """ Whether ``value`` is the ``no_default`` sentinel

    >>> is_no_default(no_default)
    True
    """
    return value is no_default
''',
        """from toolz.utils import is_no_default, no_default


def test_is_no_default():
    assert is_no_default(no_default)
    assert not is_no_default(None)
""",
    ),
    Feature(
        "toolz._signatures",
        '''

def num_signatures(func):
    """ How many signatures ``func`` has in our ``signatures`` registry (0: none) """
    return len(signatures.get(func, ()))
''',
        """import toolz  # noqa: F401 (fills the registry)
from toolz._signatures import num_signatures


def test_num_signatures():
    assert num_signatures(len) >= 1
    assert num_signatures(lambda: None) == 0
""",
    ),
    Feature(
        "toolz.sandbox.core",
        '''

def unzip_pairs(seq):
    """ Split a sequence of pairs into a tuple of firsts and a tuple of seconds

    >>> unzip_pairs([(1, 'a'), (2, 'b')])
    ((1, 2), ('a', 'b'))
    """
    pairs = list(seq)
    return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)
''',
        """from toolz.sandbox.core import unzip_pairs


def test_unzip_pairs():
    assert unzip_pairs([(1, "a"), (2, "b")]) == ((1, 2), ("a", "b"))
    assert unzip_pairs([]) == ((), ())
""",
    ),
    Feature(
        "toolz.sandbox.parallel",
        '''

def parallel_sum(seq, chunksize=128, map=map):
    """ Sum ``seq`` in chunks with ``fold`` (0 when it is empty)

    >>> parallel_sum(range(10), chunksize=3)
    45
    """
    items = list(seq)
    if not items:  # fold recurses forever on an empty sequence
        return 0
    return fold(lambda a, b: a + b, items, 0, map=map, chunksize=chunksize)
''',
        """from toolz.sandbox.parallel import parallel_sum


def test_parallel_sum():
    assert parallel_sum(range(10), chunksize=3) == 45
    assert parallel_sum([]) == 0
""",
    ),
    Feature(
        "toolz.itertoolz",
        '''

def nth_or(n, seq, default=None):
    """ The ``n``th item of ``seq``, or ``default`` when it is shorter

    >>> nth_or(5, 'abc', '-')
    '-'
    """
    return next(itertools.islice(seq, n, None), default)
''',
        """from toolz.itertoolz import nth_or


def test_nth_or():
    assert nth_or(1, "abc") == "b"
    assert nth_or(5, iter("abc"), "-") == "-"
""",
    ),
    Feature(
        "toolz.dicttoolz",
        '''

def invert(d, factory=dict):
    """ Swap the keys and values of ``d`` (its values must be hashable)

    >>> invert({'a': 1, 'b': 2})
    {1: 'a', 2: 'b'}
    """
    rv = factory()
    for key, value in d.items():
        rv[value] = key
    return rv
''',
        """from toolz.dicttoolz import invert


def test_invert():
    assert invert({"a": 1, "b": 2}) == {1: "a", 2: "b"}
""",
    ),
)

# Tests of existing functions: (what they test, the test module's code).
EXISTING = (
    (
        "sliding_window",
        "from toolz import sliding_window",
        [
            "list(sliding_window(2, [1, 2, 3, 4])) == [(1, 2), (2, 3), (3, 4)]",
            "list(sliding_window(5, [1, 2])) == []",
        ],
    ),
    (
        "partition_all",
        "from toolz import partition_all",
        ["list(partition_all(2, [1, 2, 3])) == [(1, 2), (3,)]"],
    ),
    (
        "groupby",
        "from toolz import groupby",
        ['groupby(len, ["a", "bb", "cc", "d"]) == {1: ["a", "d"], 2: ["bb", "cc"]}'],
    ),
    (
        "frequencies",
        "from toolz import frequencies",
        ['frequencies("abca") == {"a": 2, "b": 1, "c": 1}'],
    ),
    (
        "interleave",
        "from toolz import interleave",
        ['list(interleave([[1, 2, 3], "ab"])) == [1, "a", 2, "b", 3]'],
    ),
    (
        "unique",
        "from toolz import unique",
        ['list(unique(["a", "B", "b", "A"], key=str.lower)) == ["a", "B"]'],
    ),
    (
        "merge_with",
        "from toolz import merge_with",
        ["merge_with(sum, {1: 1, 2: 2}, {1: 10}) == {1: 11, 2: 2}"],
    ),
    (
        "valmap",
        "from toolz import keymap, valmap",
        ['valmap(len, {"a": "xy"}) == {"a": 2}', 'keymap(str.upper, {"a": 1}) == {"A": 1}'],
    ),
    (
        "get_in",
        "from toolz import get_in",
        [
            'get_in(["a", "b", 0], {"a": {"b": [7]}}) == 7',
            'get_in(["a", "z"], {"a": {}}, default=0) == 0',
        ],
    ),
    (
        "assoc_in",
        "from toolz import assoc_in, update_in",
        [
            'assoc_in({}, ["a", "b"], 1) == {"a": {"b": 1}}',
            'update_in({"n": 1}, ["n"], lambda x: x + 1) == {"n": 2}',
        ],
    ),
    (
        "pipe",
        "from toolz import compose, pipe",
        ['pipe(3, lambda x: x + 1, str) == "4"', 'compose(str, lambda x: x * 2)(5) == "10"'],
    ),
    ("juxt", "from toolz import juxt", ["juxt(min, max)([3, 1, 2]) == (1, 3)"]),
    ("curry", "from toolz import curry", ["curry(lambda a, b: a - b)(10)(3) == 7"]),
    ("countby", "from toolz import countby", ['countby(len, ["a", "bb", "c"]) == {1: 2, 2: 1}']),
    (
        "partitionby",
        "from toolz import partitionby",
        ["list(partitionby(lambda x: x > 2, [1, 2, 3, 4, 1])) == [(1, 2), (3, 4), (1,)]"],
    ),
    ("topk", "from toolz import topk", ["topk(2, [5, 1, 9, 3]) == (9, 5)"]),
    (
        "accumulate",
        "import operator\n\nfrom toolz import accumulate",
        ["list(accumulate(operator.add, [1, 2, 3])) == [1, 3, 6]"],
    ),
    ("memoize", "from toolz import memoize", ["calls == [2]"]),
)
