"""The gRPC PlannerService: server, client, access control and admission limits."""
