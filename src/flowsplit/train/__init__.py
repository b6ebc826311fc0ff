"""flowsplit.train"""
