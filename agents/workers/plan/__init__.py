"""Planning before spending: ``gpudeck plan generate`` (a pilot through the generate worker,
then time, tokens, bytes, servers and cost of the whole run; generate_plan.py) and
``gpudeck plan extract`` (the output's size from the model's config and the data's token
count, against the free disk and S3 prices; extract_plan.py), then ``gpudeck plan compare``
(plans of one dataset side by side, scaled to node sets; compare.py). stats.py holds the
projection's arithmetic, sample.py the pilot's sample, pilot.py the pilot itself,
dataset.py what names a plan's data, render.py the text. Light on import: the pilot loads
aiohttp, the extract plan torch and transformers only when they run.
"""
