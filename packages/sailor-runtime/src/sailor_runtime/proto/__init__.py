"""Generated protobuf code for sailor/v1/agent.proto, sailor/v1/controller.proto.

Do not edit: regenerate with `make proto` (scripts/gen_proto.py) from proto/.
"""
