"""Generated protobuf code for sailor/v1/estimate.proto, sailor/v1/job.proto, sailor/v1/plan.proto.

Do not edit: regenerate with `make proto` (scripts/gen_proto.py) from proto/.
"""
