// rewind_chatml_template (chat_template.h): rewind's own Jinja template for the Qwen3.5 ChatML
// layout (docs/QWEN35.md 7.2), for models rewind makes itself. Written for rewind; the tool
// instructions are in our own words. Behaviour:
// - system turn: "# Tools" with one JSON line per tool inside <tools></tools> and the XML call
//   format when tools are given, then the system message (trimmed), if any;
// - user turns as is (trimmed); consecutive tool messages merged into one user turn of
//   <tool_response> blocks;
// - assistant turns after the last real user query (one that is not only tool responses) carry
//   their reasoning as "<think>\n...\n</think>\n\n" (from reasoning_content, else from a
//   <think> block in the content); earlier ones keep only the content;
// - tool calls as <tool_call>\n<function=NAME>\n<parameter=ARG>\nVALUE\n</parameter>\n...
//   </function>\n</tool_call>, VALUE raw for strings and tojson otherwise;
// - generation prompt "<|im_start|>assistant\n", then "<think>\n" when enable_thinking is true,
//   "<think>\n\n</think>\n\n" when it is false, and nothing more when it is not passed.
#include "rewind/chat/chat_template.h"

namespace rw {

const char* rewind_chatml_template() {
  return R"JINJA({#- rewind ChatML template (Qwen3.5 layout) -#}
{%- if not messages %}
    {{- raise_exception('a chat needs at least one message') }}
{%- endif %}
{%- set has_system = messages[0].role == 'system' %}
{%- if tools %}
    {{- '<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>' }}
    {%- for tool in tools %}
        {{- '\n' ~ tool | tojson }}
    {%- endfor %}
    {{- '\n</tools>\n\n' }}
    {{- 'To call a function, answer with one block per call, exactly like this, and write nothing after the last block:\n\n' }}
    {{- '<tool_call>\n<function=the_function_name>\n<parameter=first_parameter>\nits value\n</parameter>\n<parameter=second_parameter>\na value may run\nover several lines\n</parameter>\n</function>\n</tool_call>\n\n' }}
    {{- 'Rules:\n- Every call is a <function=...></function> element inside its own <tool_call></tool_call> block.\n- Give every required parameter.\n- Any explanation comes before the first call, never after it.\n- If no function helps, answer normally and do not mention the functions.' }}
    {%- if has_system and messages[0].content | trim %}
        {{- '\n\n' ~ messages[0].content | trim }}
    {%- endif %}
    {{- '<|im_end|>\n' }}
{%- elif has_system %}
    {{- '<|im_start|>system\n' ~ messages[0].content | trim ~ '<|im_end|>\n' }}
{%- endif %}
{%- set state = namespace(last_query=-1) %}
{%- for m in messages %}
    {%- if m.role == 'user' %}
        {%- set text = m.content | trim %}
        {%- if not (text.startswith('<tool_response>') and text.endswith('</tool_response>')) %}
            {%- set state.last_query = loop.index0 %}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- for m in messages %}
    {%- if m.role == 'system' %}
        {%- if not loop.first %}
            {{- raise_exception('a system message may only come first') }}
        {%- endif %}
    {%- elif m.role == 'user' %}
        {{- '<|im_start|>user\n' ~ m.content | trim ~ '<|im_end|>\n' }}
    {%- elif m.role == 'assistant' %}
        {%- set answer = m.content | trim %}
        {%- set thought = '' %}
        {%- if m.reasoning_content is string %}
            {%- set thought = m.reasoning_content %}
        {%- elif '</think>' in answer %}
            {%- set thought = answer.split('</think>')[0].split('<think>')[-1] %}
            {%- set answer = answer.split('</think>')[-1].lstrip('\n') %}
        {%- endif %}
        {{- '<|im_start|>assistant\n' }}
        {%- if loop.index0 > state.last_query %}
            {{- '<think>\n' ~ thought | trim ~ '\n</think>\n\n' }}
        {%- endif %}
        {{- answer }}
        {%- if m.tool_calls is defined %}
            {%- for call in m.tool_calls %}
                {%- set fn = call.function if call.function is defined else call %}
                {%- if not loop.first %}
                    {{- '\n' }}
                {%- elif answer %}
                    {{- '\n\n' }}
                {%- endif %}
                {{- '<tool_call>\n<function=' ~ fn.name ~ '>\n' }}
                {%- if fn.arguments is mapping %}
                    {%- for key, value in fn.arguments | items %}
                        {{- '<parameter=' ~ key ~ '>\n' }}
                        {{- value if value is string else value | tojson }}
                        {{- '\n</parameter>\n' }}
                    {%- endfor %}
                {%- endif %}
                {{- '</function>\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif m.role == 'tool' %}
        {%- if loop.first or loop.previtem.role != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' ~ m.content | trim ~ '\n</tool_response>' }}
        {%- if loop.last or loop.nextitem.role != 'tool' %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- else %}
        {{- raise_exception('unknown message role: ' ~ m.role) }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined %}
        {{- '<think>\n' if enable_thinking else '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}
)JINJA";
}

}  // namespace rw
