"""benchmarks/serve.py's ratios: taken within each round, then the median over rounds, so a round where the machine
was busier moves both sides of its ratio alike."""

from benchmarks.serve import ratios


def test_ratios_are_medians_of_within_round_ratios():
    rates = {
        "1": {"plain server": [100.0, 50.0, 200.0], "Serve, 1 replica": [50.0, 40.0, 60.0]},
        "64": {
            "plain server": [100.0, 100.0, 100.0],
            "Serve, 1 replica": [50.0, 60.0, 70.0],
            "Serve, 2 replicas": [100.0, 60.0, 140.0],
        },
    }
    out = ratios(rates)
    # Within rounds: 0.5, 0.8, 0.3 -> 0.5; a ratio of the medians (55 / 100) would say 0.55.
    assert out["1"] == {"Serve 1 replica / plain": 0.5}
    assert out["64"] == {"Serve 1 replica / plain": 0.6, "Serve 2 replicas / 1 replica": 2.0}
