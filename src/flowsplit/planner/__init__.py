"""flowsplit.planner"""
