"""The agent's protocol: JSON lines in and out over stdio (`server`, `wire`), the command
handlers and their strict argument readers (`handler_api`, `device_commands`, `train_command`,
`train_args`), and the rule that every path a request names stays inside the agent's own
directories (`confine`). It owns nothing of the method: it reads a request, calls the package that
does the work, and writes exactly one reply. Python 3.6, no Flower.
"""
