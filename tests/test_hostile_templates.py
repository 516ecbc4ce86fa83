"""A checkpoint's chat template is untrusted code: rendering it is bounded in size, work and steps
(tasks/train/inputs/template_sandbox.py). Published templates render byte for byte as the plain sandbox rendered
them; a template that multiplies a string to gigabytes, recurses, loops forever or pads to a billion characters
is a TemplateError (chat_template's, naming the file, once it comes from a checkpoint) at its counted budget
(about 0.1 s) and a few MB, instead of 10.8 GB, a bare RecursionError or a hang."""

from __future__ import annotations

import json
import time
import tracemalloc

import pytest
from jinja2.exceptions import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer, models

from tasks.train.inputs.chat import jinja_template, render_jinja
from tasks.train.inputs.chat_template import TemplateChat, checkpoint_chat
from tasks.train.inputs.chat_template import TemplateError as CheckpointTemplateError
from tasks.train.inputs.template_sandbox import BoundedSandbox
from tests.test_chat_template import CHATML, LLAMA3

MISTRAL = ("{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
           "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
           "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
           "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
           "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}")
GEMMA = ("{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
         "{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
         "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
         "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
         "{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"
         "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}")
QWEN25 = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object within <tool_call></tool_call>:"
        + "\\n<|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first)
           or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""
# Llama 3.1's shape: a date default, the system message cut out, tools as indented JSON in the first user turn.
LLAMA31 = """{{- bos_token }}
{%- if not date_string is defined %}{%- set date_string = "26 Jul 2024" %}{%- endif %}
{%- if not tools is defined %}{%- set tools = none %}{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{%- if tools is not none %}{{- "Environment: ipython\\n" }}{%- endif %}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- if tools is not none %}
    {%- set first_user_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
    {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}
{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim
            + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
        {{- '{"name": "' + tool_call.name + '", "parameters": ' }}{{- tool_call.arguments | tojson }}
        {{- "}<|eot_id|>" }}
    {%- else %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" + message.content + "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}
"""
# Most of what Jinja offers, so the budget's interceptions are seen to change no value.
FEATURES = """{%- set ns = namespace(n=0, text='') -%}
{%- macro turn(m, i) -%}
[{{ i }}:{{ m.role|upper }}] {{ caller() if caller else '' }}{{ m.content|trim }}{%- endmacro -%}
{%- for m in messages if m.role != 'tool' -%}
{%- set ns.n = ns.n + m.content|length -%}{%- set ns.text = ns.text ~ m.role[:1] -%}
{%- if loop.index is divisibleby 3 %}{% continue %}{% endif -%}
{%- call turn(m, loop.index) %}{{ loop.cycle('odd', 'even') }}/{{ loop.revindex }}/{{ loop.length }} {% endcall %}
{{ '%-6s|%5.1f|%s' % (m.role, loop.index / 3, m.content[:4]) }} {{ '{:>8}|{:<4}'.format(m.role, loop.index0) }}
{{ m.content|replace('a', 'A')|center(30)|indent(2) }} {{ m.content|truncate(12, True) }} {{ m.content|wordwrap(10) }}
{{ (m.content * 2)[::3] }} {{ [m.role] * 2 + [m.content|length] }} {{ 2 ** loop.index }} {{ 7 // 2 }}
{{ 'x' in m.content }}
{%- if loop.last %}{% break %}{% endif -%}
{%- endfor %}
{{ ns.n }} {{ ns.text }} {{ messages|map(attribute='role')|unique|sort|join(', ') }} {{ messages|length }}
{{ messages|selectattr('role', 'equalto', 'user')|list|length }}
{{ messages|groupby('role')|map(attribute='grouper')|join }}
{{ range(10)|batch(3, 'x')|list }} {{ range(7)|slice(3)|list }} {{ {'b': 1, 'a': 2}|dictsort }} {{ messages[0]|tojson }}
{% filter title %}end of {{ messages|length }} turns{% endfilter %}
{% set block %}{{ 'block' ~ '!' }}{% endset %}{{ block }}
{%- for item in [[1, [2, 3]], [4]] recursive %}<{{ item if item is number else loop(item) }}>{% endfor %}
"""
TALK = [{"role": "system", "content": "Be brief, and be kind."},
        {"role": "user", "content": "What does the mill grind, and why?"},
        {"role": "assistant", "content": "Grain, by the river — für Brot. ✓"},
        {"role": "user", "content": "And then?"},
        {"role": "assistant", "content": "Flour for the bakers."}]
TOOLS = [{"type": "function", "function": {
    "name": "weather", "description": "Today's weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
CALLS = [{"role": "user", "content": "Weather in Oslo?"},
         {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "weather",
                                                                           "arguments": {"city": "Oslo"}}}]},
         {"role": "tool", "content": "{\"sky\": \"grey\"}"}, {"role": "assistant", "content": "Grey skies."}]
SPECIALS = {"bos_token": "<s>", "eos_token": "</s>"}


def before(template: str, messages: list, add_generation_prompt: bool = False, **extra) -> str:
    """`render_jinja` as it was before the budgets (plain immutable sandbox), to compare with."""
    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.globals["raise_exception"] = raise_exception
    env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False, **kw)
    return env.from_string(template).render(messages=list(messages), add_generation_prompt=add_generation_prompt,
                                            **extra)


@pytest.mark.parametrize("gen", [False, True])
@pytest.mark.parametrize("template, messages, extra", [
    (jinja_template(), TALK, {}), (LLAMA3, TALK, {}), (CHATML, TALK[1:], {}), (MISTRAL, TALK[1:], {}),
    (GEMMA, TALK[1:], {}), (QWEN25, TALK, {}), (QWEN25, CALLS, {"tools": TOOLS}), (LLAMA31, TALK, {}),
    (LLAMA31, CALLS, {"tools": TOOLS, "date_string": "1 Jan 2025"}), (FEATURES, TALK + CALLS, {})],
    ids=["forgeline", "llama3", "chatml", "mistral", "gemma", "qwen25", "qwen25-tools", "llama31",
         "llama31-tools", "features"])
def test_published_templates_render_byte_for_byte_as_before(template, messages, extra, gen):
    assert render_jinja(template, messages, gen, **SPECIALS, **extra) == \
        before(template, messages, gen, **SPECIALS, **extra)


PROBE = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]


@pytest.mark.parametrize("template, says", [
    ("{{ 'a' * 200000000 }}", "`*` would make 200,000,000"),                       # 10.8 GB before
    ("{{ 10 ** 100000000 }}", "`**` would make"),
    ("{{ '%999999999d' % 1 }}", "`%` would make"),
    ("{{ '{:>999999999}'.format(1) }}", "`str.format(...)` would make"),
    ("{{ 'a'|center(999999999) }}", "`|center` would make"),
    ("{{ 'a'.ljust(999999999) }}", "`str.ljust(...)` would make"),
    ("{% set s = 'a' * 100000 %}{{ s|replace('a', s) }}", "`|replace` would make"),
    ("{% set s = 'a' * 1000000 %}{{ [s] * 100000 }}", "printing a value"),          # one string 100,000 times
    ("{% set s = 'a' * 1000000 %}{{ range(1000)|map('string')|join(s) }}", "`|join` would make"),
    ("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
     "would make 2,097,152"),                                                        # doubling: 2^65 characters
    ("{{ messages|tojson(indent=100000000) }}", "tojson's indent"),
    ("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "recursed past Python's limit"),
    ("{{ 1 / 0 }}", "ZeroDivisionError"),
])
def test_templates_that_grow_a_value_are_refused_before_it_is_made(template, says):
    tracemalloc.start()
    try:
        with pytest.raises(TemplateError) as caught:
            render_jinja(template, PROBE)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert says in str(caught.value) and peak < 32 << 20, (str(caught.value), peak)


@pytest.mark.parametrize("template, says", [
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "loop iterations"),
    ("{% set r = range(100000)|list %}{% for x in r recursive %}{% if loop.depth < 3 %}{{ loop(r) }}{% endif %}"
     "{% endfor %}", "loop iterations"),                                             # 10^15 iterations
    ("{% set s = 'a' * 1000000 %}{% for i in range(100000) %}{% if 'b' in s %}{% endif %}{% endfor %}",
     "made or read over"),                                                           # 10^11 characters scanned
])
def test_templates_that_loop_without_end_stop_at_their_budget(template, says, monkeypatch):
    """The stop is the budget, counted: the step case stops at its first step past `max_steps`, the work case
    before any step budget is spent. The clock bound is only a backstop (each template would run for hours
    unbounded; about 0.1 s here, 1.5 s on a loaded CI machine), so a slow machine cannot fail it."""
    seen = []
    tick = BoundedSandbox.tick

    def counting_tick(self):
        seen.append(self)
        tick(self)

    monkeypatch.setattr(BoundedSandbox, "tick", counting_tick)
    start = time.perf_counter()
    with pytest.raises(TemplateError, match=says):
        render_jinja(template, PROBE)
    assert time.perf_counter() - start < 30
    sandbox = seen[-1]
    assert len(seen) == sandbox.steps and sandbox.steps <= sandbox.max_steps + 1
    if says == "loop iterations":
        assert sandbox.steps == sandbox.max_steps + 1 and sandbox.work <= sandbox.budget
    else:
        assert sandbox.work > sandbox.budget and sandbox.steps <= sandbox.max_steps


def test_the_budget_grows_with_the_conversation():
    """Caps are per input: a 2 MB reply printed twice (a template that repeats content) renders."""
    long = [{"role": "user", "content": "Summarize."}, {"role": "assistant", "content": "w " * 1_000_000}]
    template = "{% for m in messages %}{{ m.content }}{{ m.content|upper }}{% endfor %}"
    assert render_jinja(template, long) == before(template, long)


def tiny_tokenizer() -> Tokenizer:
    specials = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
    vocab = {t: i for i, t in enumerate([*specials, "a", "\n"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="a"))
    tok.add_special_tokens(specials)
    return tok


def test_a_checkpoint_template_bomb_stops_sft_naming_the_file(tmp_path):
    """What sft.py calls on the checkpoint's folder: the 10.8 GB template is refused by name at once."""
    (tmp_path / "chat_template.jinja").write_text("{{ 'a' * 200000000 }}" + CHATML)
    with pytest.raises(CheckpointTemplateError, match=r"chat_template\.jinja: .*`\*` would make"):
        checkpoint_chat(tmp_path, tiny_tokenizer())
    (tmp_path / "chat_template.jinja").write_text("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}")
    with pytest.raises(CheckpointTemplateError, match="recursed"):
        checkpoint_chat(tmp_path, tiny_tokenizer())


def test_a_template_failing_on_one_conversation_is_a_value_error_sft_reports():
    """sft_data reports a record whose rendering raises ValueError and goes on; a template's own error was a
    jinja2 TemplateError, which stopped SFT."""
    chat = TemplateChat(MISTRAL, tiny_tokenizer(), SPECIALS)
    with pytest.raises(ValueError, match="roles must alternate"):
        chat.render([{"role": "user", "content": "a"}, {"role": "user", "content": "a"}])
