# coding=utf-8
"""The task units that serve their models, by the kind their model_settings.json names.

serving/kinds.py imports a unit's serving module (no TensorFlow import there) the first time
a model of its kind is served; the module registers its ServableKind. Adding a servable task
unit: copy one (e.g. bert_mgpu/ner/), then add its line here.
"""

# model_settings.json "model" -> the module defining and registering that ServableKind.
SERVABLE_KIND_MODULES = {
    "classifier": "bert_mgpu.classifier.serving",
    "ner": "bert_mgpu.ner.serving",
    "ner_spans": "bert_mgpu.ner.serving",
    "squad": "bert_mgpu.squad.serving",
    "embedding": "bert_mgpu.embedding.serving",
}
