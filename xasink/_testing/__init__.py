"""_testing"""
