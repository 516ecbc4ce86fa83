"""Rendering a checkpoint's chat template (untrusted Jinja) with bounded memory and work.

A chat template comes with a downloaded checkpoint (`chat_template.jinja`, tokenizer_config.json) and runs in
SFT, prefer and export. Jinja's sandbox stops attribute tricks, not size: `{{ 'a' * 200000000 }}` took 10.8 GB,
a macro calling itself raised a bare RecursionError, and `{% for i in range(100000) %}{% for j in
range(100000) %}{% endfor %}{% endfor %}` never ended. Each render gets budgets derived from its input:

- value cap: nothing the template makes or prints may exceed VALUE_FACTOR × the characters of its input
  (messages, tokens, tools) + VALUE_SLACK. What can grow faster than its operands is refused *before* it is
  computed: `'a' * n`, `2 ** n`, `'%999999999d' % 1`, `s.replace('a', big)`, `x|center(n)`, `sep.join(...)`,
  and printing or joining a list that holds one big string many times (`[big] * 100000`, measured deep). The
  output is read with `generate()` and stopped past the same cap.
- work: characters made, and characters read by comparisons, calls and filters, add up to at most
  WORK_FACTOR value caps, so a loop cannot copy or scan a big string a million times.
- steps: loop iterations (`for`, a recursive `loop(...)`) and calls (macros, filters and tests included) add up
  to at most MAX_STEPS + 1 per input character: the nested `range(100000)` loops stop within 0.1 s, a macro
  calling itself twice per level (2^40 calls, no output) within 2 s.
- recursion past Python's limit, and any other exception the template's code raises, is a TemplateError.

Past a budget the render raises `TemplateLimitError` (a jinja2 `SecurityError`, hence a `TemplateError`).
Published templates (ChatML, Llama 3 and 3.1, Mistral, Gemma, Qwen 2.5 with tools) use a few hundred steps and
a few times their input, and render byte for byte as before (tests/test_hostile_templates.py).
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any, Callable, Iterator

from jinja2 import nodes
from jinja2.exceptions import TemplateError
from jinja2.ext import loopcontrols
from jinja2.runtime import LoopContext, Undefined
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

VALUE_FACTOR = 16        # a value or the output: 16 × the input's characters ...
VALUE_SLACK = 1 << 20    # ... + 1 Mi characters (or items of a list)
WORK_FACTOR = 64         # characters made or read per render, in all: 64 value caps
MAX_STEPS = 200_000      # loop iterations and calls per render, + 1 per input character
MAX_JSON_INDENT = 16     # tojson's indent and separators are repeated per nesting level and item
PADS = {"center", "batch", "slice", "str.center", "str.ljust", "str.rjust", "str.zfill"}   # an int is a width
_PRINTF = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d*)(?:\.(\*|\d*))?")
_BRACES = re.compile(r"\{[^{}:]*:[^{}\d]*(\{|\d*)(?:\.(\{|\d*))?")


class TemplateLimitError(SecurityError):
    """A chat template went past its render budget (size, work or steps); the message says which."""


def _len(value: Any) -> int:
    """Characters or items of a value, not looking inside (what reading or comparing it costs)."""
    if isinstance(value, (str, bytes, list, tuple, dict, set, frozenset)):
        return len(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value.bit_length() // 8
    return 0


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """transformers' environment (immutable sandbox, trim_blocks + lstrip_blocks, loopcontrols, `tojson` without
    ASCII escapes) with one render's budgets: build one per render."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self, input_chars: int):
        super().__init__(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        self.cap = VALUE_FACTOR * input_chars + VALUE_SLACK
        self.budget, self.max_steps = WORK_FACTOR * self.cap, MAX_STEPS + input_chars
        self.steps = self.work = 0
        # jinja's `lipsum(n)` builds n paragraphs in Python, out of the budget's sight (n = 10^6 ran past a
        # minute); no chat template uses it, so it is not offered (a call to it is an undefined-name error)
        del self.globals["lipsum"]
        self.filters = {name: self._guarded(name, f) for name, f in {**self.filters, "tojson": tojson}.items()}
        self.tests = {name: self._guarded(name, t) for name, t in self.tests.items()}
        # the budget's own filters, which `bound_tree` puts around what the sandbox does not intercept
        self.filters.update(bounded=self.made, printed=self.printed, scanned=self.scan, counted=self.counted)

    # ------------------------------------------------------------------------------------------- accounting
    def tick(self) -> None:
        self.steps += 1
        if self.steps > self.max_steps:
            raise TemplateLimitError(f"the chat template ran over {self.max_steps:,} loop iterations and calls")

    def scan(self, value: Any, cost: int | None = None) -> Any:
        """Count reading `value` (or `cost` characters) as work, and return it."""
        self.work += _len(value) if cost is None else cost
        if self.work > self.budget:
            raise TemplateLimitError(f"the chat template made or read over {self.budget:,} characters")
        return value

    def check(self, size: int, what: str) -> None:
        """Refuse what would make a value of `size` characters or items, before it is made."""
        if size > self.cap:
            raise TemplateLimitError(f"{what} would make {size:,} characters or items > the {self.cap:,} allowed")

    def made(self, value: Any) -> Any:
        """A value the template made: within the cap, counted as work."""
        self.check(_len(value), "the chat template")
        return self.scan(value)

    def printed(self, value: Any) -> Any:
        """A value about to become text (printed, concatenated, formatted, joined, a filter's argument): its size
        counted inside lists and dicts, as `str()` would write them, stopping once past the cap."""
        size, seen, todo = 0, 0, [value]
        while todo and size <= self.cap and seen <= self.cap:   # `seen`: empty lists count too
            item = todo.pop()
            seen += 1
            if isinstance(item, (list, tuple, set, frozenset)):
                todo.extend(item)
            elif isinstance(item, dict):
                todo.extend(item.keys())
                todo.extend(item.values())
            size += _len(item) + 1
        self.scan(None, seen)
        self.check(size, "printing a value")
        return value

    def counted(self, iterable: Any) -> Any:
        return _Counted(iterable, self)

    # ------------------------------------------------------------------------------------------- interceptions
    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "%":
            self.printed(right)
        self.check(binop_size(operator, left, right), f"`{operator}`")
        return self.made(super().call_binop(context, operator, left, right))

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 (jinja's names)
        __self.tick()
        if isinstance(__obj, LoopContext) and args:   # `loop(children)` of a recursive loop: count its items
            args = (__self.counted(args[0]), *args[1:])
        # a string's method (str.format comes wrapped by the sandbox): the string is an argument too
        owner = getattr(getattr(__obj, "__wrapped__", __obj), "__self__", None)
        if isinstance(owner, str):
            name = f"str.{getattr(__obj, '__name__', '')}"
            args = (_listed(args[0]), *args[1:]) if name == "str.join" and args else args
            values = (owner, *args)
        else:
            name, values = getattr(__obj, "__name__", ""), args
        for value in (*values, *kwargs.values()):
            __self.printed(__self.scan(value))
        __self.check(call_size(name, values, kwargs), f"`{name}(...)`")
        return __self.made(super().call(__context, __obj, *args, **kwargs))

    def getitem(self, obj: Any, argument: Any) -> Any:
        value = super().getitem(obj, argument)
        return self.made(value) if isinstance(argument, slice) else value

    def _guarded(self, name: str, func: Callable) -> Callable:
        """A filter or test that measures its arguments and, where its result can outgrow them, the result
        before it is made; the result is counted as made."""
        skip = 1 if hasattr(func, "jinja_pass_arg") else 0   # the context/environment argument, not a value

        @functools.wraps(func)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            self.tick()   # `map`, `select` and `sort` call filters and tests per item
            if name in ("join", "sum") and len(args) > skip:   # a generator (`map`) joined: measured as a list
                args = (*args[:skip], _listed(args[skip]), *args[skip + 1:])
            values = args[skip:]
            for value in (*values, *kwargs.values()):
                self.printed(self.scan(value))
            self.check(call_size(name, values, kwargs), f"`|{name}`")
            return self.made(func(*args, **kwargs))
        return guarded


class _Counted:
    """A loop's iterable whose items count as steps; sized like the iterable (`loop.length` stays cheap)."""

    def __init__(self, iterable: Any, env: BoundedSandbox):
        self.iterable, self.env = iterable, env

    def __len__(self) -> int:
        return len(self.iterable)   # TypeError for a generator: LoopContext then counts it itself

    def __iter__(self) -> Iterator[Any]:
        for item in self.iterable:
            self.env.tick()
            yield item


def _listed(value: Any) -> Any:
    """A one-pass iterable (a `map` or `select` result) as a list, so what it holds can be measured."""
    sized = isinstance(value, (str, bytes, list, tuple, dict, set, frozenset, Undefined))
    return value if sized or not hasattr(value, "__iter__") else list(value)


def _text(value: Any, attribute: Any = None) -> int:
    """Characters of a list's items (`attribute`: of that key of each item), as join writes them."""
    items = value if isinstance(value, (list, tuple, set, frozenset)) else ()
    if isinstance(attribute, str):
        items = [i.get(attribute) if isinstance(i, dict) else None for i in items]
    return sum(_len(i) if isinstance(i, (str, list, tuple)) else 8 for i in items)


def binop_size(operator: str, left: Any, right: Any) -> int:
    """The size `left operator right` would have, for the operators that can outgrow their operands (0 where
    the result is checked once made)."""
    ints = [v for v in (left, right) if isinstance(v, int) and not isinstance(v, bool)]
    if operator == "*" and len(ints) == 1:
        seq = right if ints[0] is left else left
        return _len(seq) * max(ints[0], 0) if isinstance(seq, (str, list, tuple)) else 0
    if operator == "**" and len(ints) == 2 and abs(left) > 1 and right > 0:
        return left.bit_length() * right // 8
    if operator == "+":
        return _len(left) + _len(right)
    if operator == "%" and isinstance(left, str):
        return len(left) + spec_width(left, _PRINTF, right if isinstance(right, tuple) else (right,))
    return 0


def call_size(name: str, args: tuple, kwargs: dict) -> int:
    """The size a filter's (`name`) or a string method's (`str.name`, the string first in `args`) result could
    reach: widths, `replace`, `join`, `indent`, `expandtabs`, `wordwrap`, `sum` and `format` can outgrow their
    arguments; 0 for the others (their result is checked once made)."""
    first, second = (args + (None, None))[:2]
    strs = all(isinstance(a, str) for a in args[:3])
    if name in ("replace", "str.replace") and len(args) >= 3 and strs:
        old, new = args[1], args[2]
        return len(first) + (first.count(old) if old else len(first) + 1) * max(len(new) - len(old), 0)
    if name == "join":
        sep = second if isinstance(second, str) else kwargs.get("d", "")
        return _text(first, kwargs.get("attribute", args[2] if len(args) > 2 else None)) + \
            _len(sep) * _len(first)
    if name == "str.join":
        return _text(second) + len(first) * _len(second)
    if name == "sum" and isinstance(kwargs.get("start", args[2] if len(args) > 2 else 0), (list, tuple)):
        return _text(first) + _len(kwargs.get("start"))
    if name == "indent" and isinstance(first, str):
        width = second if second is not None else kwargs.get("width", 4)
        return len(first) + (first.count("\n") + 1) * (_len(width) if isinstance(width, str) else width)
    if name == "str.expandtabs" and isinstance(first, str):
        tab = second if isinstance(second, int) else kwargs.get("tabsize", 8)
        return len(first) + first.count("\t") * tab
    if name == "wordwrap" and isinstance(first, str):
        wrap = args[3] if len(args) > 3 else kwargs.get("wrapstring")
        return len(first) * (1 + _len(wrap) if isinstance(wrap, str) else 2)
    if name in ("format", "str.format", "str.format_map") and isinstance(first, str):
        pattern = _PRINTF if name == "format" else _BRACES
        return len(first) + spec_width(first, pattern, (*args[1:], *kwargs.values()))
    if name in PADS:
        return max([0, *(v for v in (*args, *kwargs.values()) if isinstance(v, int) and not isinstance(v, bool))]) \
            + sum(map(_len, args))
    return 0


def spec_width(fmt: str, pattern: re.Pattern, args: tuple) -> int:
    """The widest field a format string may pad to: its largest width or precision (`%999999999d`,
    `{:>999999999}`), or an integer argument where the width comes from one (`%*d`, `{:{w}}`). A number of 20
    digits or more is left out: Python refuses it without allocating."""
    widths = [0]
    for spec in pattern.finditer(fmt):
        for part in spec.groups():
            if part in ("*", "{"):
                widths += [a for a in args if isinstance(a, int) and not isinstance(a, bool)]
            elif part and len(part) < 20:
                widths.append(int(part))
    return max(widths) + sum(map(_len, args))


def tojson(value: Any, indent: Any = None, separators: Any = None, **kwargs: Any) -> str:
    """transformers' `tojson` (ensure_ascii off) with a short indent and separators: both are repeated per
    nesting level and item, so `indent=100000000` on a short list was gigabytes."""
    if _len(indent) > MAX_JSON_INDENT or (isinstance(indent, int) and indent > MAX_JSON_INDENT) or \
            (separators is not None and sum(map(_len, separators)) > MAX_JSON_INDENT):
        raise TemplateLimitError(f"tojson's indent and separators are limited to {MAX_JSON_INDENT} characters")
    return json.dumps(value, ensure_ascii=False, indent=indent, separators=separators, **kwargs)


def bound_tree(tree: nodes.Template) -> nodes.Template:
    """Route what the sandbox does not intercept through the budget's filters: each loop's iterable
    (`counted`), each printed expression and `~` operand (`printed`), each `~` result (`bounded`) and each
    comparison's operands (`scanned`: `==` and `in` read whole strings)."""
    def wrap(node: nodes.Expr, name: str) -> nodes.Filter:
        return nodes.Filter(node, name, [], [], None, None, lineno=node.lineno)

    for loop in tree.find_all(nodes.For):
        loop.iter = wrap(loop.iter, "counted")
    for compare in tree.find_all(nodes.Compare):
        compare.expr = wrap(compare.expr, "scanned")
        for op in compare.ops:
            op.expr = wrap(op.expr, "scanned")
    for concat in tree.find_all(nodes.Concat):
        concat.nodes = [wrap(n, "printed") for n in concat.nodes]
    for output in tree.find_all(nodes.Output):
        output.nodes = [n if isinstance(n, nodes.TemplateData) else wrap(n, "printed") for n in output.nodes]
    for parent in list(tree.find_all(nodes.Node)):   # after the loops above: a `~` result, wherever it is used
        for field, value in parent.iter_fields():
            if isinstance(value, nodes.Concat):
                setattr(parent, field, wrap(value, "bounded"))
            elif isinstance(value, list) and any(isinstance(v, nodes.Concat) for v in value):
                value[:] = [wrap(v, "bounded") if isinstance(v, nodes.Concat) else v for v in value]
    return tree


def render_bounded(template: str, context: dict[str, Any], raise_exception: Callable[[str], None]) -> str:
    """`template` rendered with `context` (messages, add_generation_prompt, the special tokens, ...) within the
    budgets above; a template that fails or goes past them raises a jinja2 TemplateError."""
    env = BoundedSandbox(len(json.dumps(context, ensure_ascii=False, default=str)))
    env.globals["raise_exception"] = raise_exception
    try:
        tree = bound_tree(env.parse(template))
        tree.set_environment(env)
        out, size = [], 0
        for piece in env.from_string(tree).generate(**context):
            size += len(piece)
            if size > env.cap:
                raise TemplateLimitError(f"the chat template's output passed {env.cap:,} characters")
            out.append(piece)
        return "".join(out)
    except TemplateError:
        raise
    except RecursionError:
        raise TemplateError("the chat template recursed past Python's limit (a macro or block that calls "
                            "itself)") from None
    except Exception as exc:  # noqa: BLE001 — whatever the template's code raises is the template's error
        raise TemplateError(f"the chat template failed: {type(exc).__name__}: {str(exc)[:300]}") from None
