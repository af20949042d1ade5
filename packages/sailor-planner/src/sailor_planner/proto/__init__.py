"""Generated protobuf code for sailor/v1/planner.proto.

Do not edit: regenerate with `make proto` (scripts/gen_proto.py) from proto/.
"""
