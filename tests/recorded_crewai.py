"""Spans of crewai 1.15.30 support runs, recorded by `python record_frameworks.py crewai`
(see record_frameworks.py); replayed by recorded_spans.replay. Generated: do not edit."""

VERSION = '1.15.30'
# CREWAI_DISABLE_TELEMETRY=true, CREWAI_TRACING_ENABLED=false
SPANS = [{'id': 3,
  'parent': 2,
  'name': 'local_index.run',
  'scope': 'openinference.instrumentation.crewai',
  'kind': 'INTERNAL',
  'start': 93772911,
  'end': 94491238,
  'status': ['OK', None],
  'attributes': {'input.value': '{"query": "return policy"}',
                 'input.mime_type': 'application/json',
                 'tool.name': 'local_index',
                 'tool.description': 'Tool Name: local_index\n'
                                     'Tool Arguments: {\n'
                                     '  "properties": {\n'
                                     '    "query": {\n'
                                     '      "title": "Query",\n'
                                     '      "type": "string"\n'
                                     '    }\n'
                                     '  },\n'
                                     '  "required": [\n'
                                     '    "query"\n'
                                     '  ],\n'
                                     '  "title": "Local_Index",\n'
                                     '  "type": "object",\n'
                                     '  "additionalProperties": false\n'
                                     '}\n'
                                     'Tool Description: Search the local knowledge base.',
                 'tool.parameters': '{"properties": {"query": {"title": "Query", "type": "string"}}, "required": '
                                    '["query"], "title": "Local_Index", "type": "object"}',
                 'tool.description_updated': False,
                 'tool.cache_function': '_default_cache_function',
                 'tool.result_as_answer': False,
                 'tool.current_usage_count': 0,
                 'output.value': 'Policy doc: returns are accepted within 30 days.',
                 'output.mime_type': 'text/plain',
                 'openinference.span.kind': 'TOOL'},
  'events': []},
 {'id': 4,
  'parent': 2,
  'name': 'web_search.run',
  'scope': 'openinference.instrumentation.crewai',
  'kind': 'INTERNAL',
  'start': 97983165,
  'end': 99374642,
  'status': ['ERROR', 'search backend unreachable'],
  'attributes': {'input.value': '{"query": "refund window"}',
                 'input.mime_type': 'application/json',
                 'tool.name': 'web_search',
                 'tool.description': 'Tool Name: web_search\n'
                                     'Tool Arguments: {\n'
                                     '  "properties": {\n'
                                     '    "query": {\n'
                                     '      "title": "Query",\n'
                                     '      "type": "string"\n'
                                     '    }\n'
                                     '  },\n'
                                     '  "required": [\n'
                                     '    "query"\n'
                                     '  ],\n'
                                     '  "title": "Web_Search",\n'
                                     '  "type": "object",\n'
                                     '  "additionalProperties": false\n'
                                     '}\n'
                                     'Tool Description: Search the web.',
                 'tool.parameters': '{"properties": {"query": {"title": "Query", "type": "string"}}, "required": '
                                    '["query"], "title": "Web_Search", "type": "object"}',
                 'tool.description_updated': False,
                 'tool.cache_function': '_default_cache_function',
                 'tool.result_as_answer': False,
                 'tool.current_usage_count': 0,
                 'openinference.span.kind': 'TOOL'},
  'events': [{'name': 'exception',
              'at': 99347001,
              'attributes': {'exception.type': 'ConnectionError',
                             'exception.message': 'search backend unreachable',
                             'exception.stacktrace': 'Traceback (most recent call last):\n'
                                                     '  File '
                                                     '"/tmp/venv-traces2-crewai/lib/python3.11/site-packages/openinference/instrumentation/crewai/_wrappers.py", '
                                                     'line 1079, in _run_with_span\n'
                                                     '    response = wrapped(*args, **kwargs)\n'
                                                     '               ^^^^^^^^^^^^^^^^^^^^^^^^\n'
                                                     '  File '
                                                     '"/tmp/venv-traces2-crewai/lib/python3.11/site-packages/crewai/tools/base_tool.py", '
                                                     'line 549, in run\n'
                                                     '    result = self.func(*args, **kwargs)\n'
                                                     '             ^^^^^^^^^^^^^^^^^^^^^^^^^^\n'
                                                     '  File "/work/wt/traces2/tests/record_frameworks.py", line 297, '
                                                     'in web_search\n'
                                                     '    raise ConnectionError(WEB_SEARCH_ERROR)\n'
                                                     'ConnectionError: search backend unreachable\n',
                             'exception.escaped': 'False'}}]},
 {'id': 6,
  'parent': 5,
  'name': 'local_index.run',
  'scope': 'openinference.instrumentation.crewai',
  'kind': 'INTERNAL',
  'start': 128618858,
  'end': 129366609,
  'status': ['OK', None],
  'attributes': {'input.value': '{"query": "shipping"}',
                 'input.mime_type': 'application/json',
                 'tool.name': 'local_index',
                 'tool.description': 'Tool Name: local_index\n'
                                     'Tool Arguments: {\n'
                                     '  "properties": {\n'
                                     '    "query": {\n'
                                     '      "title": "Query",\n'
                                     '      "type": "string"\n'
                                     '    }\n'
                                     '  },\n'
                                     '  "required": [\n'
                                     '    "query"\n'
                                     '  ],\n'
                                     '  "title": "Local_Index",\n'
                                     '  "type": "object",\n'
                                     '  "additionalProperties": false\n'
                                     '}\n'
                                     'Tool Description: Search the local knowledge base.',
                 'tool.parameters': '{"properties": {"query": {"title": "Query", "type": "string"}}, "required": '
                                    '["query"], "title": "Local_Index", "type": "object"}',
                 'tool.description_updated': False,
                 'tool.cache_function': '_default_cache_function',
                 'tool.result_as_answer': False,
                 'tool.current_usage_count': 0,
                 'output.value': 'Policy doc: returns are accepted within 30 days.',
                 'output.mime_type': 'text/plain',
                 'openinference.span.kind': 'TOOL'},
  'events': []},
 {'id': 5,
  'parent': 2,
  'name': 'Delegate work to coworker.run',
  'scope': 'openinference.instrumentation.crewai',
  'kind': 'INTERNAL',
  'start': 104960719,
  'end': 143687900,
  'status': ['OK', None],
  'attributes': {'input.value': '{"task": "Check the shipping policy", "context": "A customer asks about returns", '
                                '"coworker": "Writer"}',
                 'input.mime_type': 'application/json',
                 'tool.name': 'Delegate work to coworker',
                 'tool.description': 'Tool Name: delegate_work_to_coworker\n'
                                     'Tool Arguments: {\n'
                                     '  "properties": {\n'
                                     '    "task": {\n'
                                     '      "description": "The task to delegate",\n'
                                     '      "title": "Task",\n'
                                     '      "type": "string"\n'
                                     '    },\n'
                                     '    "context": {\n'
                                     '      "description": "The context for the task",\n'
                                     '      "title": "Context",\n'
                                     '      "type": "string"\n'
                                     '    },\n'
                                     '    "coworker": {\n'
                                     '      "description": "The role/name of the coworker to delegate to",\n'
                                     '      "title": "Coworker",\n'
                                     '      "type": "string"\n'
                                     '    }\n'
                                     '  },\n'
                                     '  "required": [\n'
                                     '    "task",\n'
                                     '    "context",\n'
                                     '    "coworker"\n'
                                     '  ],\n'
                                     '  "title": "DelegateWorkToolSchema",\n'
                                     '  "type": "object",\n'
                                     '  "additionalProperties": false\n'
                                     '}\n'
                                     'Tool Description: Delegate a specific task to one of the following coworkers: '
                                     'Writer\n'
                                     'The input to this tool should be the coworker, the task you want them to do, and '
                                     'ALL necessary context to execute the task, they know nothing about the task, so '
                                     "share absolutely everything you know, don't reference things but instead explain "
                                     'them.',
                 'tool.parameters': '{"properties": {"task": {"description": "The task to delegate", "title": "Task", '
                                    '"type": "string"}, "context": {"description": "The context for the task", '
                                    '"title": "Context", "type": "string"}, "coworker": {"description": "The role/name '
                                    'of the coworker to delegate to", "title": "Coworker", "type": "string"}}, '
                                    '"required": ["task", "context", "coworker"], "title": "DelegateWorkToolSchema", '
                                    '"type": "object"}',
                 'tool.description_updated': False,
                 'tool.cache_function': '_default_cache_function',
                 'tool.result_as_answer': False,
                 'tool.current_usage_count': 0,
                 'output.value': 'Returns are accepted within 30 days.',
                 'output.mime_type': 'text/plain',
                 'openinference.span.kind': 'TOOL'},
  'events': []},
 {'id': 2,
  'parent': 1,
  'name': 'Researcher._execute_core',
  'scope': 'openinference.instrumentation.crewai',
  'kind': 'INTERNAL',
  'start': 59617019,
  'end': 153834651,
  'status': ['OK', None],
  'attributes': {'input.value': '{"agent": {"role": "Researcher", "goal": "Answer policy questions", "backstory": '
                                '"Support desk", "verbose": false, "allow_delegation": true, "max_iter": 6, "max_rpm": '
                                'null, "id": "def71c42-74fc-45ef-a452-08880f29ec65", "key": '
                                '"c355ac381e7569aedd157208e7b148cc"}, "context": "", "tools": ["name=\'local_index\' '
                                "description='Search the local knowledge base.' env_vars=[] args_schema=<class "
                                "'crewai.tools.base_tool.Local_Index'> result_schema=None description_updated=False "
                                'cache_function=<function _default_cache_function at 0x7f10b4842e80> '
                                'result_as_answer=False max_usage_count=None tool_failure_policy=None '
                                'current_usage_count=0 func=<function crewai_run.<locals>.local_index at '
                                '0x7f10b843ad40> tool_type=\'crewai.tools.base_tool.Tool\'", "name=\'web_search\' '
                                "description='Search the web.' env_vars=[] args_schema=<class "
                                "'crewai.tools.base_tool.Web_Search'> result_schema=None description_updated=False "
                                'cache_function=<function _default_cache_function at 0x7f10b4842e80> '
                                'result_as_answer=False max_usage_count=None tool_failure_policy=None '
                                'current_usage_count=0 func=<function crewai_run.<locals>.web_search at '
                                '0x7f10a047fa60> tool_type=\'crewai.tools.base_tool.Tool\'", "name=\'Delegate work to '
                                'coworker\' description=\\"Delegate a specific task to one of the following coworkers: '
                                'Writer\\\\nThe input to this tool should be the coworker, the task you want them to '
                                'do, and ALL necessary context to execute the task, they know nothing about the task, '
                                "so share absolutely everything you know, don't reference things but instead explain "
                                'them.\\" env_vars=[] args_schema=<class '
                                "'crewai.tools.agent_tools.delegate_work_tool.DelegateWorkToolSchema'> "
                                'result_schema=None description_updated=False cache_function=<function '
                                '_default_cache_function at 0x7f10b4842e80> result_as_answer=False '
                                'max_usage_count=None tool_failure_policy=None current_usage_count=0 '
                                'agents=[Agent(role=Writer, goal=Check policies, backstory=Support desk)] '
                                'tool_type=\'crewai.tools.agent_tools.delegate_work_tool.DelegateWorkTool\'", '
                                '"name=\'Ask question to coworker\' description=\\"Ask a specific question to one of '
                                'the following coworkers: Writer\\\\nThe input to this tool should be the coworker, '
                                'the question you have for them, and ALL necessary context to ask the question '
                                'properly, they know nothing about the question, so share absolutely everything you '
                                'know, don\'t reference things but instead explain them.\\" env_vars=[] '
                                'args_schema=<class '
                                "'crewai.tools.agent_tools.ask_question_tool.AskQuestionToolSchema'> "
                                'result_schema=None description_updated=False cache_function=<function '
                                '_default_cache_function at 0x7f10b4842e80> result_as_answer=False '
                                'max_usage_count=None tool_failure_policy=None current_usage_count=0 '
                                'agents=[Agent(role=Writer, goal=Check policies, backstory=Support desk)] '
                                'tool_type=\'crewai.tools.agent_tools.ask_question_tool.AskQuestionTool\'"]}',
                 'input.mime_type': 'application/json',
                 'task_key': '55204748537a427282ec05816ba6f97d',
                 'task_id': 'a352b010-d6f3-482e-a084-8451a902bb95',
                 'graph.node.id': 'Researcher',
                 'crew_key': '58e61ad7f7342824a4f0ce1f609bf0e6',
                 'crew_id': 'c62abb04-c792-4f99-80c4-ceca47465222',
                 'output.value': '{"description": "What is your return policy?", "name": "What is your return '
                                 'policy?", "expected_output": "The policy", "summary": "What is your return '
                                 'policy?...", "raw": "Returns are accepted within 30 days.", "pydantic": null, '
                                 '"json_dict": null, "agent": "Researcher", "output_format": "raw", "messages": '
                                 '[{"role": "system", "content": "You are Researcher. Support desk\\nYour personal '
                                 'goal is: Answer policy questions"}, {"role": "user", "content": "\\nCurrent Task: '
                                 'What is your return policy?\\n\\nThis is the expected criteria for your final '
                                 'answer: The policy\\nyou MUST return the actual complete content as the final '
                                 'answer, not a summary."}, {"role": "assistant", "content": "", "tool_calls": [{"id": '
                                 '"call_1", "type": "function", "function": {"name": "local_index", "arguments": '
                                 '"{\\"query\\": \\"return policy\\"}"}}]}, {"role": "tool", "content": "Policy doc: '
                                 'returns are accepted within 30 days.", "tool_call_id": "call_1", "name": '
                                 '"local_index"}, {"role": "assistant", "content": "", "tool_calls": [{"id": "call_2", '
                                 '"type": "function", "function": {"name": "web_search", "arguments": "{\\"query\\": '
                                 '\\"refund window\\"}"}}]}, {"role": "tool", "content": "Error executing tool: search '
                                 'backend unreachable", "tool_call_id": "call_2", "name": "web_search"}, {"role": '
                                 '"assistant", "content": "", "tool_calls": [{"id": "call_3", "type": "function", '
                                 '"function": {"name": "delegate_work_to_coworker", "arguments": "{\\"task\\": '
                                 '\\"Check the shipping policy\\", \\"context\\": \\"A customer asks about returns\\", '
                                 '\\"coworker\\": \\"Writer\\"}"}}]}, {"role": "tool", "content": "Returns are '
                                 'accepted within 30 days.", "tool_call_id": "call_3", "name": '
                                 '"delegate_work_to_coworker"}, {"role": "assistant", "content": "Returns are accepted '
                                 'within 30 days."}], "tool_failures": [{"tool_name": "web_search", "failure": '
                                 '{"message": "search backend unreachable", "reason": "exception", "code": '
                                 '"ConnectionError", "retryable": false, "details": {}}, "tool_args": {"query": '
                                 '"refund window"}, "agent_role": "Researcher", "task_name": "What is your return '
                                 'policy?", "task_id": "a352b010-d6f3-482e-a084-8451a902bb95"}]}',
                 'output.mime_type': 'application/json',
                 'openinference.span.kind': 'AGENT'},
  'events': []},
 {'id': 1,
  'parent': None,
  'name': 'Crew_c62abb04-c792-4f99-80c4-ceca47465222.kickoff',
  'scope': 'openinference.instrumentation.crewai',
  'kind': 'INTERNAL',
  'start': 0,
  'end': 162703875,
  'status': ['OK', None],
  'attributes': {'crew_key': '58e61ad7f7342824a4f0ce1f609bf0e6',
                 'crew_id': 'c62abb04-c792-4f99-80c4-ceca47465222',
                 'crew_inputs': '',
                 'crew_agents': '[{"key": "c355ac381e7569aedd157208e7b148cc", "id": '
                                '"def71c42-74fc-45ef-a452-08880f29ec65", "role": "Researcher", "goal": "Answer policy '
                                'questions", "backstory": "Support desk", "verbose?": false, "max_iter": 6, "max_rpm": '
                                'null, "delegation_enabled": true, "tools_names": ["local_index", "web_search"]}, '
                                '{"key": "7e6eda5af0e7bfe8f12db538fabd8303", "id": '
                                '"ed44ba4c-530d-44a8-ae4d-50f66b5c92bc", "role": "Writer", "goal": "Check policies", '
                                '"backstory": "Support desk", "verbose?": false, "max_iter": 4, "max_rpm": null, '
                                '"delegation_enabled": false, "tools_names": ["local_index"]}]',
                 'crew_tasks': '[{"id": "a352b010-d6f3-482e-a084-8451a902bb95", "description": "What is your return '
                               'policy?", "expected_output": "The policy", "async_execution?": false, "human_input?": '
                               'false, "agent_role": "Researcher", "agent_key": "c355ac381e7569aedd157208e7b148cc", '
                               '"context": null, "tools_names": ["local_index", "web_search"]}]',
                 'output.value': '{"raw": "Returns are accepted within 30 days.", "pydantic": null, "json_dict": null, '
                                 '"tasks_output": [{"description": "What is your return policy?", "name": "What is '
                                 'your return policy?", "expected_output": "The policy", "summary": "What is your '
                                 'return policy?...", "raw": "Returns are accepted within 30 days.", "pydantic": null, '
                                 '"json_dict": null, "agent": "Researcher", "output_format": "raw", "messages": '
                                 '[{"role": "system", "content": "You are Researcher. Support desk\\nYour personal '
                                 'goal is: Answer policy questions"}, {"role": "user", "content": "\\nCurrent Task: '
                                 'What is your return policy?\\n\\nThis is the expected criteria for your final '
                                 'answer: The policy\\nyou MUST return the actual complete content as the final '
                                 'answer, not a summary."}, {"role": "assistant", "content": "", "tool_calls": [{"id": '
                                 '"call_1", "type": "function", "function": {"name": "local_index", "arguments": '
                                 '"{\\"query\\": \\"return policy\\"}"}}]}, {"role": "tool", "content": "Policy doc: '
                                 'returns are accepted within 30 days.", "tool_call_id": "call_1", "name": '
                                 '"local_index"}, {"role": "assistant", "content": "", "tool_calls": [{"id": "call_2", '
                                 '"type": "function", "function": {"name": "web_search", "arguments": "{\\"query\\": '
                                 '\\"refund window\\"}"}}]}, {"role": "tool", "content": "Error executing tool: search '
                                 'backend unreachable", "tool_call_id": "call_2", "name": "web_search"}, {"role": '
                                 '"assistant", "content": "", "tool_calls": [{"id": "call_3", "type": "function", '
                                 '"function": {"name": "delegate_work_to_coworker", "arguments": "{\\"task\\": '
                                 '\\"Check the shipping policy\\", \\"context\\": \\"A customer asks about returns\\", '
                                 '\\"coworker\\": \\"Writer\\"}"}}]}, {"role": "tool", "content": "Returns are '
                                 'accepted within 30 days.", "tool_call_id": "call_3", "name": '
                                 '"delegate_work_to_coworker"}, {"role": "assistant", "content": "Returns are accepted '
                                 'within 30 days."}], "tool_failures": [{"tool_name": "web_search", "failure": '
                                 '{"message": "search backend unreachable", "reason": "exception", "code": '
                                 '"ConnectionError", "retryable": false, "details": {}}, "tool_args": {"query": '
                                 '"refund window"}, "agent_role": "Researcher", "task_name": "What is your return '
                                 'policy?", "task_id": "a352b010-d6f3-482e-a084-8451a902bb95"}]}], "token_usage": '
                                 '{"total_tokens": 0, "prompt_tokens": 0, "cached_prompt_tokens": 0, '
                                 '"completion_tokens": 0, "reasoning_tokens": 0, "cache_creation_tokens": 0, '
                                 '"successful_requests": 0}}',
                 'output.mime_type': 'application/json',
                 'openinference.span.kind': 'CHAIN'},
  'events': []}]
