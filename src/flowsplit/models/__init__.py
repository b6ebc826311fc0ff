"""flowsplit.models"""
