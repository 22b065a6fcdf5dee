"""objects: object collectives move any picklable Python object (here small dicts).

all_gather_object, broadcast_object_list, gather_object and scatter_object_list work like
their tensor twins; under the hood they pickle the object into a byte tensor and send that.
"""

import torch.distributed as dist


def main(ctx):
    rank, world = dist.get_rank(), dist.get_world_size()

    for iteration in ctx.iterations():
        note = {"rank": rank, "iteration": iteration}

        everyone = [None] * world
        dist.all_gather_object(everyone, note)  # everyone[i] is rank i's note
        notes = [{"rank": i, "iteration": iteration} for i in range(world)]
        ctx.check(everyone == notes, f"all_gather of iteration {iteration}")

        box = [{"lesson": iteration}] if rank == 0 else [None]
        dist.broadcast_object_list(box, src=0)  # box[0] becomes rank 0's object
        ctx.check(box == [{"lesson": iteration}], f"broadcast of iteration {iteration}")

        pile = [None] * world if rank == 0 else None
        dist.gather_object(note, pile, dst=0)  # only rank 0 receives the notes
        if rank == 0:
            ctx.check(pile == everyone, f"gather of iteration {iteration}")

        deal = None  # only the source deals
        if rank == 0:
            deal = [{"seat": i, "iteration": iteration} for i in range(world)]
        seat = [None]
        dist.scatter_object_list(seat, deal, src=0)  # rank i receives deal[i]
        ctx.check(seat == [{"seat": rank, "iteration": iteration}],
                  f"scatter of iteration {iteration}")

        if world >= 2 and rank in (0, 1):  # point-to-point objects: rank 0 writes to 1
            letter = [{"hello": iteration}] if rank == 0 else [None]
            if rank == 0:
                dist.send_object_list(letter, dst=1)
            else:
                dist.recv_object_list(letter, src=0)
            ctx.check(letter == [{"hello": iteration}],
                      f"send/recv of iteration {iteration}")
