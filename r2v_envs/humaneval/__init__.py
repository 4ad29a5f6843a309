"""R2V/HumanEval-v0: HumanEval+ (EvalPlus) as a multi-step ``write_code`` / ``test`` / ``submit`` environment.

Heavy imports (evalplus) happen inside functions; importing this package is cheap.
"""
