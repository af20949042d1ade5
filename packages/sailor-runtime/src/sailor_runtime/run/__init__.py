"""`sailor run`: the planner server, the controller and the worker agents as one command."""
