"""flowsplit.federated"""
