"""The nodes of a graph in an order that computes each input before it is read."""


def dependency_order(graph):
    """The nodes in an order that computes each input before it is read (Kahn's algorithm), or None
    when they form a cycle. Builder graphs are not always listed in such an order."""
    produced = {}
    for node in graph.node:
        for out in node.output:
            if out:
                produced[out] = node
    waiting, readers = {}, {}
    for node in graph.node:
        deps = {name for name in node.input if name in produced}
        waiting[id(node)] = len(deps)
        for name in deps:
            readers.setdefault(name, []).append(node)
    ready = [n for n in reversed(graph.node) if waiting[id(n)] == 0]
    order = []
    while ready:
        node = ready.pop()
        order.append(node)
        for out in node.output:
            for reader in readers.get(out, []):
                waiting[id(reader)] -= 1
                if waiting[id(reader)] == 0:
                    ready.append(reader)
    return order if len(order) == len(graph.node) else None
