"""flowsplit.data"""
