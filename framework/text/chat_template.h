#pragma once
// Chat templates (a model's tokenizer.chat_template, Jinja2) for ChatML models, rendered
// as transformers renders them (Jinja2 with trim_blocks and lstrip_blocks): the same text.
//
// The Jinja this reads, enough for ChatML templates such as SmolLM2's and Qwen's simple
// ones: text; {{ expression }}; {% for x in messages %} ... {% endfor %};
// {% if %} / {% elif %} / {% else %} / {% endif %}; {# comments #}; the whitespace
// controls {%- -%} {{- -}}. Expressions: 'strings' and "strings" with Python's escapes,
// integers, true/false/none, the variables messages, add_generation_prompt, bos_token,
// eos_token, loop.first/last/index/index0/length, message['role'] or message.role (and
// content), messages[i] (negative from the end), + and ~ joining strings, == != and or
// not, `in` on strings, parentheses and the filters trim and length. Anything else (set,
// macros, tool calls, other filters) is a kiln::Error naming it and its offset.
#include <string>
#include <vector>

namespace kiln::text {

struct ChatMessage;

// Renders `tmpl` for these messages. Templates of another family than ChatML (Llama 3's
// headers, [INST], Gemma's turns, ...) are refused with an error naming the family.
std::string render_chat_template(const std::string& tmpl, const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt, const std::string& bos_token,
                                 const std::string& eos_token);

}  // namespace kiln::text
