"""flowsplit.report"""
