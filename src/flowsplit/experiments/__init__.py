"""flowsplit.experiments"""
