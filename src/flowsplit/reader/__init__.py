"""The packet reader: pcap/pcapng captures into bidirectional flows and their views.

Apart from the dataset tools (:mod:`flowsplit.data`, which label, split and store what
it reads) and below them: it imports nothing of flowsplit but errors and the ground floor.
The walk of a capture: :mod:`~flowsplit.reader.capfile` (positional reads, compressed or
not) -> :mod:`~flowsplit.reader.pcap` (record offsets) -> :mod:`~flowsplit.reader.staging`
(one reusable buffer a chunk at a time) -> :mod:`~flowsplit.reader.packets` (vectorised
header decoding; :mod:`~flowsplit.reader.fragments` reassembles) ->
:mod:`~flowsplit.reader.assemble` (flows) -> :mod:`~flowsplit.reader.views` (per-flow
views); :mod:`~flowsplit.reader.flows` runs the pipeline. :mod:`~flowsplit.reader.kernel`
is the one door to the compiled fast paths; :mod:`~flowsplit.reader.reference` is the
slow dpkt reader the fast one is checked against.
"""
