"""The searches: one step (select, finish, keep) and the lockstep loop that runs it,
greedy, sampling, beam and constrained; their rules; teacher forcing; the confidence's
features, defined once and gathered as the searches go.
"""
