"""Reduces a model's Jinja chat template to a conversation format the engine applies natively.

kvx does not interpret Jinja at run time. Instead the converter renders the template with jinja2, in the
environment HF transformers uses for apply_chat_template, on probe conversations, and records the format
when every rendering equals what that format would produce: today ChatML, with or without a default
system message. A template that matches nothing is kept in the model directory with the reason, so that
`kvx chat` can say why it refuses.
"""

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
PROBE_SYSTEM = "You answer briefly."


def chatml(messages, default_system=None):
    """The ChatML rendering of messages with the assistant header appended (add_generation_prompt)."""
    text = ""
    if default_system is not None and messages[0]["role"] != "system":
        text += f"{IM_START}system\n{default_system}{IM_END}\n"
    for m in messages:
        text += f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n"
    return text + f"{IM_START}assistant\n"


def _environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env


def _probes():
    user1 = {"role": "user", "content": "What is 2 + 2?"}
    answer = {"role": "assistant", "content": "4."}
    user2 = {"role": "user", "content": "And 3 + 3?\nSay it in words."}
    system = {"role": "system", "content": PROBE_SYSTEM}
    return [[user1], [system, user1], [user1, answer, user2], [system, user1, answer, user2]]


def _default_system(rendered_single_user):
    """The system message the template inserts before a lone user message, or None."""
    head = f"{IM_START}system\n"
    if not rendered_single_user.startswith(head):
        return None
    end = rendered_single_user.find(f"{IM_END}\n")
    return rendered_single_user[len(head):end] if end >= 0 else None


def analyse_chat_template(source, bos_token="", eos_token=""):
    """config.json's "chat" entry (minus the file name) for the template text `source`."""
    try:
        template = _environment().from_string(source)
        render = lambda messages: template.render(messages=messages, add_generation_prompt=True,
                                                  bos_token=bos_token, eos_token=eos_token)
        probes = _probes()
        default_system = _default_system(render(probes[0]))
        for messages in probes:
            got, want = render(messages), chatml(messages, default_system)
            if got != want:
                return {"format": None,
                        "unsupported": f"its rendering of a {len(messages)}-message conversation is not ChatML "
                                       f"(starts {got[:60]!r}); kvx applies ChatML templates only"}
    except jinja2.exceptions.TemplateError as e:
        return {"format": None, "unsupported": f"jinja2 cannot render it: {e}"}
    entry = {"format": "chatml"}
    if default_system is not None:
        entry["default_system"] = default_system
    return entry
