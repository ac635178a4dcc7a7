import elastream as es


def test_fluent_pipeline_runs_in_order():
    flow = es.Flow("smoke")
    flow.source(range(1000)).map(lambda x: x + 1).filter(lambda x: x % 2 == 0).sink(es.ops.Collect(), name="out")
    result = es.Runner(threads=2).run(flow, timeout=30)
    assert result.outputs["out"] == list(range(2, 1001, 2))
