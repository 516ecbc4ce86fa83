"""lm-eval task definitions from local files: the tasks forgeline ships (built at run time from text the model never
trained on) and lm-eval's own definitions of ARC, HellaSwag, MMLU and GSM8K pointed at files a user downloaded.

Every task is written as lm-eval YAML plus its data (`<task>.yaml`, `<task>.jsonl`) into one folder that
`TaskManager(include_path=...)` and `lm_eval run --include_path` read. Data files are named relative to the project
root (the stage and the command line both run there), so the folder is the same bytes in any checkout.

Shipped tasks (multiple choice: lm-eval's acc / acc_norm with their standard errors; rolling: perplexities):
- `forgeline_docstring_cloze`: the last word of a Python stdlib docstring's first sentence, after the definition
  line, among `choices` words ending other docstrings. Modules in mix's train split are left out (held out).
- `forgeline_prose_choice`: which of `choices` spans of `continuation_words` words follows a passage of
  `context_words` words of held-out prose (the others are spans of other held-out documents).
- `forgeline_prose_ppl`: word/byte perplexity and bits per byte of held-out prose passages of `passage_words`.
"""

from __future__ import annotations

import ast
import hashlib
import json
import random
import re
from pathlib import Path
from typing import Any, Iterable

import yaml

from specs.benchmark import ShippedTasksSpec, TaskFileSpec
from tasks.core.files import write_text_atomic
from tasks.data.embedded import read_embedded
from tasks.data.records import Doc

DOCSTRING_CLOZE, PROSE_CHOICE, PROSE_PPL = "forgeline_docstring_cloze", "forgeline_prose_choice", "forgeline_prose_ppl"
CHOICE_METRICS = [{"metric": "acc", "aggregation": "mean", "higher_is_better": True},
                  {"metric": "acc_norm", "aggregation": "mean", "higher_is_better": True}]
PPL_METRICS = [{"metric": m, "aggregation": agg, "higher_is_better": False}  # lm-eval's own pairs (wikitext's)
               for m, agg in (("word_perplexity", "weighted_perplexity"), ("byte_perplexity", "weighted_perplexity"),
                              ("bits_per_byte", "bits_per_byte"))]
WORD = re.compile(r"\S+")
LAST_WORD = re.compile(r"^[A-Za-z][a-z]{2,}$")  # a plain word (no markup, no identifiers) ends a cloze sentence


def _rng(seed: int, *parts: str) -> random.Random:
    digest = hashlib.blake2b("\x1f".join([str(seed), *parts]).encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "big"))


def _local_task(name: str, data_file: str, fields: dict[str, Any]) -> dict[str, Any]:
    """A task over one local JSON-lines test split."""
    return {"task": name, "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": data_file}},
            "test_split": "test", **fields, "metadata": {"version": 1.0}}


def write_task(folder: Path, config: dict[str, Any], docs: list[dict[str, Any]] | None = None,
               extra_yaml: str = "") -> str:
    """Write `<task>.yaml` (and `<task>.jsonl` when `docs` are given) under `folder`; return the task's name."""
    name = config["task"]
    if docs is not None:
        write_text_atomic(folder / f"{name}.jsonl", "".join(json.dumps(d, ensure_ascii=False, sort_keys=True) + "\n"
                                                            for d in docs))
    text = yaml.safe_dump(config, sort_keys=False, allow_unicode=True, width=1000) + extra_yaml
    write_text_atomic(folder / f"{name}.yaml", text)
    return name


# ------------------------------------------------------------------------------------------- docstring cloze
def _first_sentence(doc: str) -> list[str] | None:
    """The words of a docstring's first sentence (5 to 25 words, ending in a plain word and a period)."""
    para = " ".join(doc.strip().split("\n\n")[0].split())
    end = para.find(". ")
    sentence = para if end < 0 else para[:end + 1]
    words = sentence.split()
    if not 5 <= len(words) <= 25 or not words[-1].endswith(".") or not LAST_WORD.match(words[-1][:-1]):
        return None
    return words


def docstring_items(seed: int, n: int, exclude: set[str]) -> list[dict[str, str]]:
    """Up to `n` cloze items {context, answer, origin} from stdlib definitions, modules in a seeded order, those
    whose origin (`stdlib:<path>`, as ingest records it) is in `exclude` — trained on — left out. Parsing stops
    once there are enough (~1 s instead of ~10 s for the whole stdlib)."""
    modules = [d for d in read_embedded("code") if isinstance(d, Doc) and d.origin not in exclude]
    modules.sort(key=lambda d: hashlib.blake2b(f"{seed}\x1f{d.key}".encode(), digest_size=8).digest())
    items: list[dict[str, str]] = []
    for doc in modules:
        try:
            tree = ast.parse(doc.text)
        except (SyntaxError, ValueError):
            continue
        for node in tree.body:
            if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) or node.name.startswith("_"):
                continue
            words = _first_sentence(ast.get_docstring(node) or "")
            if words is None:
                continue
            head = (f"class {node.name}:" if isinstance(node, ast.ClassDef)
                    else f"def {node.name}({ast.unparse(node.args)}):")
            items.append({"context": f'{head}\n    """{" ".join(words[:-1])}', "answer": words[-1][:-1],
                          "origin": f"{doc.origin}#{node.name}"})
            if len(items) >= n:
                return items
    return items


def choice_docs(items: list[dict[str, str]], choices: int, seed: int, task: str) -> list[dict[str, Any]]:
    """Multiple-choice docs: each item's answer among `choices - 1` answers of other items (distinct words),
    in a seeded order per item."""
    answers = sorted({it["answer"] for it in items})
    docs = []
    for i, item in enumerate(items):
        rng = _rng(seed, task, str(i))
        others = [a for a in rng.sample(answers, min(len(answers), 4 * choices)) if a != item["answer"]]
        if len(others) < choices - 1:
            continue
        options = [item["answer"], *others[:choices - 1]]
        rng.shuffle(options)
        docs.append({"id": f"{task}-{i:05d}", "context": item["context"], "choices": [f" {o}" for o in options],
                     "gold": options.index(item["answer"]), "origin": item.get("origin", "")})
    return docs


# ---------------------------------------------------------------------------------------------------- prose
def _spans(text: str, size: int) -> list[tuple[int, int]]:
    """Non-overlapping windows of `size` words: (index of first word, index past the last)."""
    n = len(WORD.findall(text))
    return [(i, i + size) for i in range(0, n - size + 1, size)]


def prose_choice_items(texts: list[str], spec: ShippedTasksSpec, seed: int) -> list[dict[str, Any]]:
    """Docs of `forgeline_prose_choice`: passages taken round-robin over the held-out documents."""
    words = [[(m.start(), m.end(), m.group()) for m in WORD.finditer(t)] for t in texts]
    size = spec.context_words + spec.continuation_words
    windows = [[(d, s) for s, _ in _spans(t, size)] for d, t in enumerate(texts)]
    docs = []
    for i, (d, s) in enumerate(list(_round_robin(windows))[:spec.docs]):
        ws = words[d]
        cut = s + spec.context_words
        context = texts[d][ws[s][0]:ws[cut - 1][1]]
        answer = " ".join(w for _, _, w in ws[cut:cut + spec.continuation_words])
        rng = _rng(seed, PROSE_CHOICE, str(i))
        pool = [k for k in range(len(texts)) if k != d and len(words[k]) >= spec.continuation_words]
        others = []
        for k in rng.sample(pool, min(len(pool), spec.choices - 1)):
            start = rng.randrange(len(words[k]) - spec.continuation_words + 1)
            others.append(" ".join(w for _, _, w in words[k][start:start + spec.continuation_words]))
        if len(others) < spec.choices - 1:
            continue
        options = [answer, *others]
        rng.shuffle(options)
        docs.append({"id": f"{PROSE_CHOICE}-{i:05d}", "context": context, "choices": [f" {o}" for o in options],
                     "gold": options.index(answer)})
    return docs


def _round_robin(groups: list[list[Any]]) -> Iterable[Any]:
    """One item of each group in turn: passages spread over documents before a document gives a second one."""
    for depth in range(max(map(len, groups), default=0)):
        yield from (g[depth] for g in groups if depth < len(g))


def prose_ppl_docs(texts: list[str], spec: ShippedTasksSpec) -> list[dict[str, Any]]:
    """Passages of `passage_words` words (their original whitespace kept), round-robin over the documents."""
    windows = [[(d, s, e) for s, e in _spans(t, spec.passage_words)] for d, t in enumerate(texts)]
    docs = []
    for i, (d, s, e) in enumerate(list(_round_robin(windows))[:spec.docs]):
        ws = [m.span() for m in WORD.finditer(texts[d])]
        docs.append({"id": f"{PROSE_PPL}-{i:05d}", "text": texts[d][ws[s][0]:ws[e - 1][1]]})
    return docs


def shipped_configs(folder_rel: str) -> dict[str, dict[str, Any]]:
    """The YAML of each shipped task, data files under `folder_rel` (relative to the project root)."""
    choice = {"output_type": "multiple_choice", "doc_to_text": "{{context}}", "doc_to_choice": "{{choices}}",
              "doc_to_target": "{{gold}}", "metric_list": CHOICE_METRICS}
    return {
        DOCSTRING_CLOZE: _local_task(DOCSTRING_CLOZE, f"{folder_rel}/{DOCSTRING_CLOZE}.jsonl", choice),
        PROSE_CHOICE: _local_task(PROSE_CHOICE, f"{folder_rel}/{PROSE_CHOICE}.jsonl", choice),
        PROSE_PPL: _local_task(PROSE_PPL, f"{folder_rel}/{PROSE_PPL}.jsonl", {
            "output_type": "loglikelihood_rolling", "doc_to_text": "", "doc_to_target": "{{text}}",
            "metric_list": PPL_METRICS}),
    }


# ------------------------------------------------------------------------------------- downloaded benchmarks
HELLASWAG_UTILS = '''"""HellaSwag's preprocessing, as lm-eval's own tasks/hellaswag/utils.py does it (written by forgeline)."""
import re


def preprocess(text):
    text = text.strip()
    text = text.replace(" [title]", ". ")
    text = re.sub("\\\\[.*?\\\\]", "", text)
    text = text.replace("  ", " ")
    return text


def process_docs(dataset):
    def _process_doc(doc):
        ctx = doc["ctx_a"] + " " + doc["ctx_b"].capitalize()
        return {"query": preprocess(doc["activity_label"] + ": " + ctx),
                "choices": [preprocess(ending) for ending in doc["endings"]], "gold": int(doc["label"])}

    return dataset.map(_process_doc)
'''
# lm-eval 0.4's own definitions (tasks/arc/arc_easy.yaml, hellaswag/hellaswag.yaml, mmlu/default, gsm8k/gsm8k.yaml),
# minus where the data comes from. MMLU is one task over a file holding every subject (cais/mmlu's `all`), each
# question introduced by its own subject's description: the per-subject group would name 57 Hub datasets.
FORMATS: dict[str, dict[str, Any]] = {
    "arc": {"output_type": "multiple_choice", "doc_to_text": "Question: {{question}}\nAnswer:",
            "doc_to_target": "{{choices.label.index(answerKey)}}", "doc_to_choice": "{{choices.text}}",
            "metric_list": CHOICE_METRICS},
    "hellaswag": {"output_type": "multiple_choice", "doc_to_text": "{{query}}", "doc_to_target": "{{label}}",
                  "doc_to_choice": "choices", "metric_list": CHOICE_METRICS},
    "mmlu": {"output_type": "multiple_choice",
             "description": "The following are multiple choice questions (with answers) about "
                            "{{subject.replace('_', ' ')}}.\n\n",
             "doc_to_text": "{{question.strip()}}\nA. {{choices[0]}}\nB. {{choices[1]}}\nC. {{choices[2]}}\n"
                            "D. {{choices[3]}}\nAnswer:",
             "doc_to_choice": ["A", "B", "C", "D"], "doc_to_target": "answer", "fewshot_config": {"sampler": "first_n"},
             "metric_list": [CHOICE_METRICS[0]]},
    "gsm8k": {"output_type": "generate_until", "doc_to_text": "Question: {{question}}\nAnswer:",
              "doc_to_target": "{{answer}}", "num_fewshot": 5,
              "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True,
                               "ignore_case": True, "ignore_punctuation": False,
                               "regexes_to_ignore": [",", "\\$", "(?s).*#### ", "\\.$"]}],
              "generation_kwargs": {"until": ["Question:", "</s>", "<|im_end|>"], "do_sample": False,
                                    "temperature": 0.0, "max_gen_toks": 256},
              "filter_list": [
                  {"name": "strict-match", "filter": [{"function": "regex", "regex_pattern": "#### (\\-?[0-9\\.\\,]+)"},
                                                      {"function": "take_first"}]},
                  {"name": "flexible-extract", "filter": [
                      {"function": "regex", "group_select": -1, "regex_pattern": "(-?[$0-9.,]{2,})|(-?[0-9]+)"},
                      {"function": "take_first"}]}]},
}
BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


def file_task(spec: TaskFileSpec) -> tuple[dict[str, Any], str, str]:
    """(YAML config, extra YAML text, helper module text) of a downloaded benchmark file in a known format."""
    builder = BUILDERS[Path(spec.path).suffix.lower()]
    files = {"test": spec.path, **({"train": spec.fewshot_path} if spec.fewshot_path else {})}
    config = {"task": spec.name, "dataset_path": builder, "dataset_kwargs": {"data_files": files},
              "test_split": "test", **({"fewshot_split": "train"} if spec.fewshot_path else {}),
              **FORMATS[spec.format], "metadata": {"version": 1.0, "format": spec.format}}
    if spec.format == "gsm8k" and spec.max_gen_toks is not None:
        config["generation_kwargs"] = {**config["generation_kwargs"], "max_gen_toks": spec.max_gen_toks}
    if spec.format == "hellaswag":
        module = f"{spec.name}_utils"
        return config, f"process_docs: !function {module}.process_docs\n", HELLASWAG_UTILS
    return config, "", ""


def write_file_task(folder: Path, spec: TaskFileSpec) -> str:
    """Write the YAML (and HellaSwag's helper module) of one downloaded benchmark file; return the task's name."""
    config, extra, helper = file_task(spec)
    if helper:
        write_text_atomic(folder / f"{spec.name}_utils.py", helper)
    return write_task(folder, config, extra_yaml=extra)
