"""The episodes a run keeps: one record format whatever protocol wrote them, a bounded per-step sample written
by the agent, and one reader for the run folders of real jobs, rehearsals and evaluations."""
