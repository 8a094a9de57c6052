"""The CPU rehearsal of a training job through the real `ray job submit`: the Ray head, the episode and
training rehearsals, the job side of the CPU layer and the layer itself (`cpu/`). Never uploaded by a real
submit."""
